// RUN: gnnc-opt %s --split-input-file -p unfuse | filecheck %s

// gin with a degree-scaled message: out[v] = (1 + eps) * x[v] + sum(x[u] * deg_out(u)).
// Every S / E op's result is written to an E tensor and read back, every D / A
// op's to a V tensor; parameter arithmetic, gathers and degrees stay inline.
// The aggregate read back through `gather dst` is D, so the kernel returns D.

builtin.module {
  func.func @gin(%x: !graph.tensor<V, f32, [F]>, %eps: !graph.tensor<P, f32, []>) -> !graph.value<A, f32, [F]> attributes {graph.param_names = ["x", "eps"], graph.result_names = ["out"], graph.result_types = [!graph.tensor<V, f32, [F]>], graph.single_result} {
    %one = graph.constant 1.000000e+00 : f32 : !graph.value<P, f32, []>
    %epsp = graph.gather %eps "param" : !graph.tensor<P, f32, []> -> !graph.value<P, f32, []>
    %scale = graph.binary add %one, %epsp : (!graph.value<P, f32, []>, !graph.value<P, f32, []>) -> !graph.value<P, f32, []>
    %xv = graph.gather %x "dst" : !graph.tensor<V, f32, [F]> -> !graph.value<D, f32, [F]>
    %self = graph.binary mul %scale, %xv : (!graph.value<P, f32, []>, !graph.value<D, f32, [F]>) -> !graph.value<D, f32, [F]>
    %xu = graph.gather %x "src" : !graph.tensor<V, f32, [F]> -> !graph.value<S, f32, [F]>
    %deg = graph.degree "out" "src" : !graph.value<S, f32, []>
    %msg = graph.binary mul %xu, %deg : (!graph.value<S, f32, [F]>, !graph.value<S, f32, []>) -> !graph.value<S, f32, [F]>
    %agg = graph.aggregate sum %msg : !graph.value<S, f32, [F]> -> !graph.value<A, f32, [F]>
    %out = graph.binary add %self, %agg : (!graph.value<D, f32, [F]>, !graph.value<A, f32, [F]>) -> !graph.value<A, f32, [F]>
    func.return %out : !graph.value<A, f32, [F]>
  }
}

// CHECK-LABEL: func.func @gin
// CHECK-SAME:    -> !graph.value<D, f32, [F]>
// CHECK-NEXT:    %one = graph.constant
// CHECK-NEXT:    [[EPS:%.*]] = graph.gather %eps "param"
// CHECK-NEXT:    [[SCALE:%.*]] = graph.binary add %one, [[EPS]] : (!graph.value<P, f32, []>, !graph.value<P, f32, []>) -> !graph.value<P, f32, []>
// CHECK-NEXT:    [[XV:%.*]] = graph.gather %x "dst"
// CHECK-NEXT:    [[SELF:%.*]] = graph.binary mul [[SCALE]], [[XV]]
// CHECK-NEXT:    [[SELF_T:%.*]] = graph.materialize [[SELF]] : !graph.value<D, f32, [F]> -> !graph.tensor<V, f32, [F]>
// CHECK-NEXT:    [[SELF_V:%.*]] = graph.gather [[SELF_T]] "dst"
// CHECK-NEXT:    [[XU:%.*]] = graph.gather %x "src"
// CHECK-NEXT:    %deg = graph.degree "out" "src"
// CHECK-NEXT:    [[MSG:%.*]] = graph.binary mul [[XU]], %deg
// CHECK-NEXT:    [[MSG_T:%.*]] = graph.materialize [[MSG]] : !graph.value<S, f32, [F]> -> !graph.tensor<E, f32, [F]>
// CHECK-NEXT:    [[MSG_E:%.*]] = graph.gather [[MSG_T]] "edge" : !graph.tensor<E, f32, [F]> -> !graph.value<E, f32, [F]>
// CHECK-NEXT:    [[AGG:%.*]] = graph.aggregate sum [[MSG_E]]
// CHECK-NEXT:    [[AGG_T:%.*]] = graph.materialize [[AGG]] : !graph.value<A, f32, [F]> -> !graph.tensor<V, f32, [F]>
// CHECK-NEXT:    [[AGG_V:%.*]] = graph.gather [[AGG_T]] "dst" : !graph.tensor<V, f32, [F]> -> !graph.value<D, f32, [F]>
// CHECK-NEXT:    [[OUT:%.*]] = graph.binary add [[SELF_V]], [[AGG_V]] : (!graph.value<D, f32, [F]>, !graph.value<D, f32, [F]>) -> !graph.value<D, f32, [F]>
// CHECK-NEXT:    func.return [[OUT]]

// -----

// A value per (vertex, relation) pair is written out by its own sweep already
// (graph.materialize_pairs): its operations stay inline there, and only the
// per-edge quotient of its gathered rows is materialised.

builtin.module {
  func.func @rgcn(%x: !graph.tensor<V, f32, [K]>, %W: !graph.tensor<R, f32, [K, N]>) -> !graph.value<A, f32, [N]> attributes {graph.param_names = ["x", "W"], graph.result_names = ["out"], graph.result_types = [!graph.tensor<V, f32, [N]>], graph.single_result} {
    %xv = graph.gather %x "dst" : !graph.tensor<V, f32, [K]> -> !graph.value<D, f32, [K]>
    %Wr = graph.gather %W "rel" : !graph.tensor<R, f32, [K, N]> -> !graph.value<E, f32, [K, N]>
    %t = graph.matvec %xv, %Wr : (!graph.value<D, f32, [K]>, !graph.value<E, f32, [K, N]>) -> !graph.value<E, f32, [N]>
    %y = graph.materialize_pairs %t "src" : !graph.value<E, f32, [N]> -> !graph.tensor<RS, f32, [N]>
    %ye = graph.gather %y "src_rel" : !graph.tensor<RS, f32, [N]> -> !graph.value<E, f32, [N]>
    %c = graph.degree "in" "dst" {relation} : !graph.value<E, f32, []>
    %q = graph.binary div %ye, %c : (!graph.value<E, f32, [N]>, !graph.value<E, f32, []>) -> !graph.value<E, f32, [N]>
    %out = graph.aggregate sum %q : !graph.value<E, f32, [N]> -> !graph.value<A, f32, [N]>
    func.return %out : !graph.value<A, f32, [N]>
  }
}

// CHECK-LABEL: func.func @rgcn
// CHECK:         [[T:%.*]] = graph.matvec {{%.*}}, {{%.*}} : (!graph.value<D, f32, [K]>, !graph.value<E, f32, [K, N]>)
// CHECK-NEXT:    [[Y:%.*]] = graph.materialize_pairs [[T]] "src"
// CHECK-NEXT:    [[YE:%.*]] = graph.gather [[Y]] "src_rel"
// CHECK:         [[Q:%.*]] = graph.binary div [[YE]], {{%.*}}
// CHECK-NEXT:    [[QT:%.*]] = graph.materialize [[Q]] : !graph.value<E, f32, [N]> -> !graph.tensor<E, f32, [N]>
