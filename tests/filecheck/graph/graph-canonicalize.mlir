// RUN: gnnc-opt %s -p graph-canonicalize | filecheck %s

// out[v] = sum(-(-((0 + x[u] * 1) * (2 * 3))) * (w[e] / 1) - 0):
// the constants fold to 6, the identities and the double negation go.

builtin.module {
  func.func @k(%x: !graph.tensor<V, f32, [F]>, %w: !graph.tensor<E, f32, []>) -> !graph.value<A, f32, [F]> attributes {graph.param_names = ["x", "w"], graph.result_names = ["out"], graph.result_types = [!graph.tensor<V, f32, [F]>], graph.single_result} {
    %xu = graph.gather %x "src" : !graph.tensor<V, f32, [F]> -> !graph.value<S, f32, [F]>
    %one = graph.constant 1.000000e+00 : f32 : !graph.value<P, f32, []>
    %zero = graph.constant 0.000000e+00 : f32 : !graph.value<P, f32, []>
    %two = graph.constant 2.000000e+00 : f32 : !graph.value<P, f32, []>
    %three = graph.constant 3.000000e+00 : f32 : !graph.value<P, f32, []>
    %times_one = graph.binary mul %xu, %one : (!graph.value<S, f32, [F]>, !graph.value<P, f32, []>) -> !graph.value<S, f32, [F]>
    %plus_zero = graph.binary add %zero, %times_one : (!graph.value<P, f32, []>, !graph.value<S, f32, [F]>) -> !graph.value<S, f32, [F]>
    %six = graph.binary mul %two, %three : (!graph.value<P, f32, []>, !graph.value<P, f32, []>) -> !graph.value<P, f32, []>
    %scaled = graph.binary mul %plus_zero, %six : (!graph.value<S, f32, [F]>, !graph.value<P, f32, []>) -> !graph.value<S, f32, [F]>
    %neg = graph.unary neg %scaled : !graph.value<S, f32, [F]> -> !graph.value<S, f32, [F]>
    %neg_neg = graph.unary neg %neg : !graph.value<S, f32, [F]> -> !graph.value<S, f32, [F]>
    %we = graph.gather %w "edge" : !graph.tensor<E, f32, []> -> !graph.value<E, f32, []>
    %by_one = graph.binary div %we, %one : (!graph.value<E, f32, []>, !graph.value<P, f32, []>) -> !graph.value<E, f32, []>
    %msg = graph.binary mul %neg_neg, %by_one : (!graph.value<S, f32, [F]>, !graph.value<E, f32, []>) -> !graph.value<E, f32, [F]>
    %minus_zero = graph.binary sub %msg, %zero : (!graph.value<E, f32, [F]>, !graph.value<P, f32, []>) -> !graph.value<E, f32, [F]>
    %out = graph.aggregate sum %minus_zero : !graph.value<E, f32, [F]> -> !graph.value<A, f32, [F]>
    func.return %out : !graph.value<A, f32, [F]>
  }
}

// CHECK-LABEL: func.func @k
// CHECK-NEXT:    %xu = graph.gather %x "src"
// CHECK-NEXT:    [[SIX:%.*]] = graph.constant 6.000000e+00 : f32 : !graph.value<P, f32, []>
// CHECK-NEXT:    %scaled = graph.binary mul %xu, [[SIX]]
// CHECK-NEXT:    %we = graph.gather %w "edge"
// CHECK-NEXT:    %msg = graph.binary mul %scaled, %we
// CHECK-NEXT:    %out = graph.aggregate sum %msg
// CHECK-NEXT:    func.return %out
