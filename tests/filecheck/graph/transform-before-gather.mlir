// RUN: gnnc-opt %s --split-input-file -p transform-before-gather | filecheck %s

// mlp_aggr: out[v] = max(relu((x[u] + x[v]) @ W)). The matvec distributes over
// the sum; x[u] @ W and x[v] @ W are both the per-vertex x @ W, computed once
// (materialised into a V tensor) and gathered at u and at v.

builtin.module {
  func.func @mlp_aggr(%x: !graph.tensor<V, f32, [D1]>, %W: !graph.tensor<P, f32, [D1, D2]>) -> !graph.value<A, f32, [D2]> attributes {graph.param_names = ["x", "W"], graph.result_names = ["out"], graph.result_types = [!graph.tensor<V, f32, [D2]>], graph.single_result} {
    %xu = graph.gather %x "src" : !graph.tensor<V, f32, [D1]> -> !graph.value<S, f32, [D1]>
    %xv = graph.gather %x "dst" : !graph.tensor<V, f32, [D1]> -> !graph.value<D, f32, [D1]>
    %sum = graph.binary add %xu, %xv : (!graph.value<S, f32, [D1]>, !graph.value<D, f32, [D1]>) -> !graph.value<E, f32, [D1]>
    %Wp = graph.gather %W "param" : !graph.tensor<P, f32, [D1, D2]> -> !graph.value<P, f32, [D1, D2]>
    %mv = graph.matvec %sum, %Wp : (!graph.value<E, f32, [D1]>, !graph.value<P, f32, [D1, D2]>) -> !graph.value<E, f32, [D2]>
    %r = graph.unary relu %mv : !graph.value<E, f32, [D2]> -> !graph.value<E, f32, [D2]>
    %out = graph.aggregate max %r : !graph.value<E, f32, [D2]> -> !graph.value<A, f32, [D2]>
    func.return %out : !graph.value<A, f32, [D2]>
  }
}

// CHECK-LABEL: func.func @mlp_aggr
// CHECK-NEXT:    %xv = graph.gather %x "dst"
// CHECK-NEXT:    %Wp = graph.gather %W "param"
// CHECK-NEXT:    [[XW:%.*]] = graph.matvec %xv, %Wp : (!graph.value<D, f32, [D1]>, !graph.value<P, f32, [D1, D2]>) -> !graph.value<D, f32, [D2]>
// CHECK-NEXT:    [[Y:%.*]] = graph.materialize [[XW]] : !graph.value<D, f32, [D2]> -> !graph.tensor<V, f32, [D2]>
// CHECK-NEXT:    [[YU:%.*]] = graph.gather [[Y]] "src" : !graph.tensor<V, f32, [D2]> -> !graph.value<S, f32, [D2]>
// CHECK-NEXT:    [[YV:%.*]] = graph.gather [[Y]] "dst" : !graph.tensor<V, f32, [D2]> -> !graph.value<D, f32, [D2]>
// CHECK-NEXT:    [[E:%.*]] = graph.binary add [[YU]], [[YV]] : (!graph.value<S, f32, [D2]>, !graph.value<D, f32, [D2]>) -> !graph.value<E, f32, [D2]>
// CHECK-NEXT:    %r = graph.unary relu [[E]]
// CHECK-NEXT:    %out = graph.aggregate max %r
// CHECK-NOT:     graph.matvec

// -----

// A one-element input row: x[u] @ W costs no more per edge than reading a
// transformed row would, and stays where it is.

builtin.module {
  func.func @narrow(%x: !graph.tensor<V, f32, [1]>, %W: !graph.tensor<P, f32, [1, D2]>) -> !graph.value<A, f32, [D2]> attributes {graph.param_names = ["x", "W"], graph.result_names = ["out"], graph.result_types = [!graph.tensor<V, f32, [D2]>], graph.single_result} {
    %xu = graph.gather %x "src" : !graph.tensor<V, f32, [1]> -> !graph.value<S, f32, [1]>
    %Wp = graph.gather %W "param" : !graph.tensor<P, f32, [1, D2]> -> !graph.value<P, f32, [1, D2]>
    %mv = graph.matvec %xu, %Wp : (!graph.value<S, f32, [1]>, !graph.value<P, f32, [1, D2]>) -> !graph.value<S, f32, [D2]>
    %out = graph.aggregate sum %mv : !graph.value<S, f32, [D2]> -> !graph.value<A, f32, [D2]>
    func.return %out : !graph.value<A, f32, [D2]>
  }
}

// CHECK-LABEL: func.func @narrow
// CHECK-NEXT:    %xu = graph.gather %x "src"
// CHECK-NEXT:    %Wp = graph.gather %W "param"
// CHECK-NEXT:    %mv = graph.matvec %xu, %Wp
// CHECK-NEXT:    %out = graph.aggregate sum %mv
// CHECK-NOT:     graph.materialize
