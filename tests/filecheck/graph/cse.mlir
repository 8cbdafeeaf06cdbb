// RUN: gnnc-opt %s -p cse | filecheck %s

// xDSL's CSE on the graph dialect: graph ops are pure, so a gather, a degree
// or an arithmetic op computed twice is computed once; the aggregates, which
// differ in kind, both stay.

builtin.module {
  func.func @k(%x: !graph.tensor<V, f32, [F]>) -> (!graph.value<A, f32, [F]>, !graph.value<A, f32, [F]>) attributes {graph.param_names = ["x"], graph.result_names = ["hi", "lo"], graph.result_types = [!graph.tensor<V, f32, [F]>, !graph.tensor<V, f32, [F]>]} {
    %xu = graph.gather %x "src" : !graph.tensor<V, f32, [F]> -> !graph.value<S, f32, [F]>
    %deg = graph.degree "out" "src" : !graph.value<S, f32, []>
    %m = graph.binary mul %xu, %deg : (!graph.value<S, f32, [F]>, !graph.value<S, f32, []>) -> !graph.value<S, f32, [F]>
    %xu_again = graph.gather %x "src" : !graph.tensor<V, f32, [F]> -> !graph.value<S, f32, [F]>
    %deg_again = graph.degree "out" "src" : !graph.value<S, f32, []>
    %m_again = graph.binary mul %xu_again, %deg_again : (!graph.value<S, f32, [F]>, !graph.value<S, f32, []>) -> !graph.value<S, f32, [F]>
    %hi = graph.aggregate max %m : !graph.value<S, f32, [F]> -> !graph.value<A, f32, [F]>
    %lo = graph.aggregate min %m_again : !graph.value<S, f32, [F]> -> !graph.value<A, f32, [F]>
    func.return %hi, %lo : !graph.value<A, f32, [F]>, !graph.value<A, f32, [F]>
  }
}

// CHECK-LABEL: func.func @k
// CHECK-NEXT:    %xu = graph.gather %x "src"
// CHECK-NEXT:    %deg = graph.degree "out" "src"
// CHECK-NEXT:    %m = graph.binary mul %xu, %deg
// CHECK-NEXT:    %hi = graph.aggregate max %m
// CHECK-NEXT:    %lo = graph.aggregate min %m
// CHECK-NEXT:    func.return %hi, %lo
