// RUN: gnnc-opt %s --split-input-file -p deferred-division | filecheck %s

// gat: out[v] = sum(softmax(s[e]) * h[u]), alpha[e] = softmax(s[e]). The sum
// weighs by exp(s - m) and is scaled once by 1 / max(z, 1e-30), z the sum of
// the exponentials; alpha becomes exp(s - m) * (1 / z). No edge_softmax is left.

builtin.module {
  func.func @gat(%h: !graph.tensor<V, f32, [H, F]>, %el: !graph.tensor<V, f32, [H]>, %er: !graph.tensor<V, f32, [H]>) -> (!graph.value<A, f32, [H, F]>, !graph.value<E, f32, [H]>) attributes {graph.param_names = ["h", "el", "er"], graph.result_names = ["out", "alpha"], graph.result_types = [!graph.tensor<V, f32, [H, F]>, !graph.tensor<E, f32, [H]>]} {
    %elu = graph.gather %el "src" : !graph.tensor<V, f32, [H]> -> !graph.value<S, f32, [H]>
    %erv = graph.gather %er "dst" : !graph.tensor<V, f32, [H]> -> !graph.value<D, f32, [H]>
    %s = graph.binary add %elu, %erv : (!graph.value<S, f32, [H]>, !graph.value<D, f32, [H]>) -> !graph.value<E, f32, [H]>
    %alpha = graph.edge_softmax %s : !graph.value<E, f32, [H]> -> !graph.value<E, f32, [H]>
    %hu = graph.gather %h "src" : !graph.tensor<V, f32, [H, F]> -> !graph.value<S, f32, [H, F]>
    %msg = graph.binary mul %alpha, %hu : (!graph.value<E, f32, [H]>, !graph.value<S, f32, [H, F]>) -> !graph.value<E, f32, [H, F]>
    %out = graph.aggregate sum %msg : !graph.value<E, f32, [H, F]> -> !graph.value<A, f32, [H, F]>
    func.return %out, %alpha : !graph.value<A, f32, [H, F]>, !graph.value<E, f32, [H]>
  }
}

// CHECK-LABEL: func.func @gat
// CHECK:         %s = graph.binary add %elu, %erv
// CHECK-NEXT:    [[M:%.*]] = graph.aggregate max %s {stabilizer} : !graph.value<E, f32, [H]> -> !graph.value<A, f32, [H]>
// CHECK-NEXT:    [[SHIFTED:%.*]] = graph.binary sub %s, [[M]]
// CHECK-NEXT:    [[EX:%.*]] = graph.unary exp [[SHIFTED]] : !graph.value<E, f32, [H]>
// CHECK-NEXT:    [[Z:%.*]] = graph.aggregate sum [[EX]] : !graph.value<E, f32, [H]> -> !graph.value<A, f32, [H]>
// CHECK-NEXT:    [[TINY:%.*]] = graph.constant 1.000000e-30 : f32
// CHECK-NEXT:    [[ONE:%.*]] = graph.constant 1.000000e+00 : f32
// CHECK-NEXT:    [[SAFE:%.*]] = graph.binary max [[Z]], [[TINY]]
// CHECK-NEXT:    [[INV:%.*]] = graph.binary div [[ONE]], [[SAFE]] : (!graph.value<P, f32, []>, !graph.value<A, f32, [H]>) -> !graph.value<A, f32, [H]>
// CHECK-NEXT:    [[ALPHA:%.*]] = graph.binary mul [[EX]], [[INV]] : (!graph.value<E, f32, [H]>, !graph.value<A, f32, [H]>) -> !graph.value<E, f32, [H]>
// CHECK-NEXT:    %hu = graph.gather %h "src"
// CHECK-NEXT:    [[W:%.*]] = graph.binary mul [[EX]], %hu : (!graph.value<E, f32, [H]>, !graph.value<S, f32, [H, F]>) -> !graph.value<E, f32, [H, F]>
// CHECK-NEXT:    [[NUM:%.*]] = graph.aggregate sum [[W]] : !graph.value<E, f32, [H, F]> -> !graph.value<A, f32, [H, F]>
// CHECK-NEXT:    [[OUT:%.*]] = graph.binary mul [[NUM]], [[INV]] : (!graph.value<A, f32, [H, F]>, !graph.value<A, f32, [H]>) -> !graph.value<A, f32, [H, F]>
// CHECK-NEXT:    func.return [[OUT]], [[ALPHA]]
// CHECK-NOT:     graph.edge_softmax

// -----

// A softmax no sum weighs by: nothing to defer.

builtin.module {
  func.func @scores(%el: !graph.tensor<V, f32, [H]>) -> !graph.value<E, f32, [H]> attributes {graph.param_names = ["el"], graph.result_names = ["alpha"], graph.result_types = [!graph.tensor<E, f32, [H]>], graph.single_result} {
    %elu = graph.gather %el "src" : !graph.tensor<V, f32, [H]> -> !graph.value<S, f32, [H]>
    %alpha = graph.edge_softmax %elu : !graph.value<S, f32, [H]> -> !graph.value<E, f32, [H]>
    func.return %alpha : !graph.value<E, f32, [H]>
  }
}

// CHECK-LABEL: func.func @scores
// CHECK-NEXT:    %elu = graph.gather %el "src"
// CHECK-NEXT:    %alpha = graph.edge_softmax %elu
// CHECK-NEXT:    func.return %alpha
