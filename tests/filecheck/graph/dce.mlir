// RUN: gnnc-opt %s -p dce | filecheck %s

// xDSL's DCE on the graph dialect: ops no result depends on go, a whole unused
// chain (gather, arithmetic, aggregate) with them; what the results use stays.

builtin.module {
  func.func @k(%x: !graph.tensor<V, f32, [F]>, %w: !graph.tensor<E, f32, []>) -> !graph.value<A, f32, [F]> attributes {graph.param_names = ["x", "w"], graph.result_names = ["out"], graph.result_types = [!graph.tensor<V, f32, [F]>], graph.single_result} {
    %xu = graph.gather %x "src" : !graph.tensor<V, f32, [F]> -> !graph.value<S, f32, [F]>
    %we = graph.gather %w "edge" : !graph.tensor<E, f32, []> -> !graph.value<E, f32, []>
    %unused_xv = graph.gather %x "dst" : !graph.tensor<V, f32, [F]> -> !graph.value<D, f32, [F]>
    %unused_e = graph.binary add %xu, %unused_xv : (!graph.value<S, f32, [F]>, !graph.value<D, f32, [F]>) -> !graph.value<E, f32, [F]>
    %unused_max = graph.aggregate max %unused_e : !graph.value<E, f32, [F]> -> !graph.value<A, f32, [F]>
    %msg = graph.binary mul %we, %xu : (!graph.value<E, f32, []>, !graph.value<S, f32, [F]>) -> !graph.value<E, f32, [F]>
    %out = graph.aggregate sum %msg : !graph.value<E, f32, [F]> -> !graph.value<A, f32, [F]>
    func.return %out : !graph.value<A, f32, [F]>
  }
}

// CHECK-LABEL: func.func @k
// CHECK-NEXT:    %xu = graph.gather %x "src"
// CHECK-NEXT:    %we = graph.gather %w "edge"
// CHECK-NEXT:    %msg = graph.binary mul %we, %xu
// CHECK-NEXT:    %out = graph.aggregate sum %msg
// CHECK-NEXT:    func.return %out
// CHECK-NOT:     unused
