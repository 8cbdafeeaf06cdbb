// RUN: gnnc-opt %s --split-input-file -p relation-transform-first | filecheck %s
// RUN: gnnc-opt %s --split-input-file -p 'relation-transform-first{form=per_edge}' | filecheck %s --check-prefix=PER-EDGE
// RUN: not gnnc-opt %s -p 'relation-transform-first{form=diagonal}' 2>&1 | filecheck %s --check-prefix=ERR

// rgcn: out[v] = x[v] @ root + sum((x[u] @ W[rel(e)]) / deg_in(v, rel(e))). The
// relation's transform of the source row depends on the edge only through its
// (source, relation) pair: it is computed once per pair, at the pair's vertex
// (a `dst` read in the pair sweep), and gathered per edge at its pair's row.

builtin.module {
  func.func @rgcn(%x: !graph.tensor<V, f32, [K]>, %W: !graph.tensor<R, f32, [K, N]>, %root: !graph.tensor<P, f32, [K, N]>) -> !graph.value<A, f32, [N]> attributes {graph.param_names = ["x", "W", "root"], graph.result_names = ["out"], graph.result_types = [!graph.tensor<V, f32, [N]>], graph.single_result} {
    %xv = graph.gather %x "dst" : !graph.tensor<V, f32, [K]> -> !graph.value<D, f32, [K]>
    %rootp = graph.gather %root "param" : !graph.tensor<P, f32, [K, N]> -> !graph.value<P, f32, [K, N]>
    %self = graph.matvec %xv, %rootp : (!graph.value<D, f32, [K]>, !graph.value<P, f32, [K, N]>) -> !graph.value<D, f32, [N]>
    %xu = graph.gather %x "src" : !graph.tensor<V, f32, [K]> -> !graph.value<S, f32, [K]>
    %Wr = graph.gather %W "rel" : !graph.tensor<R, f32, [K, N]> -> !graph.value<E, f32, [K, N]>
    %m = graph.matvec %xu, %Wr : (!graph.value<S, f32, [K]>, !graph.value<E, f32, [K, N]>) -> !graph.value<E, f32, [N]>
    %c = graph.degree "in" "dst" {relation} : !graph.value<E, f32, []>
    %q = graph.binary div %m, %c : (!graph.value<E, f32, [N]>, !graph.value<E, f32, []>) -> !graph.value<E, f32, [N]>
    %agg = graph.aggregate sum %q : !graph.value<E, f32, [N]> -> !graph.value<A, f32, [N]>
    %out = graph.binary add %self, %agg : (!graph.value<D, f32, [N]>, !graph.value<A, f32, [N]>) -> !graph.value<A, f32, [N]>
    func.return %out : !graph.value<A, f32, [N]>
  }
}

// CHECK-LABEL: func.func @rgcn
// CHECK:         %Wr = graph.gather %W "rel"
// CHECK-NEXT:    [[T:%.*]] = graph.matvec %xv, %Wr : (!graph.value<D, f32, [K]>, !graph.value<E, f32, [K, N]>) -> !graph.value<E, f32, [N]>
// CHECK-NEXT:    [[Y:%.*]] = graph.materialize_pairs [[T]] "src" : !graph.value<E, f32, [N]> -> !graph.tensor<RS, f32, [N]>
// CHECK-NEXT:    [[YE:%.*]] = graph.gather [[Y]] "src_rel" : !graph.tensor<RS, f32, [N]> -> !graph.value<E, f32, [N]>
// CHECK-NEXT:    %c = graph.degree "in" "dst" {relation}
// CHECK-NEXT:    %q = graph.binary div [[YE]], %c
// CHECK-NOT:     graph.gather %x "src"

// PER-EDGE-LABEL: func.func @rgcn
// PER-EDGE:         %m = graph.matvec %xu, %Wr
// PER-EDGE-NOT:     graph.materialize_pairs

// -----

// rgcn's input gradient on the reversed graph: sum((g[u] / deg_out(u, rel(e))) @ W_T[rel(e)]).
// The count per (vertex, relation) pair is a scalar of the edge: moved out of the
// transform, which then hoists.

builtin.module {
  func.func @grad_x(%g: !graph.tensor<V, f32, [N]>, %WT: !graph.tensor<R, f32, [N, K]>) -> !graph.value<A, f32, [K]> attributes {graph.param_names = ["g", "WT"], graph.result_names = ["out"], graph.result_types = [!graph.tensor<V, f32, [K]>], graph.single_result} {
    %gu = graph.gather %g "src" : !graph.tensor<V, f32, [N]> -> !graph.value<S, f32, [N]>
    %c = graph.degree "out" "src" {relation} : !graph.value<E, f32, []>
    %s = graph.binary div %gu, %c : (!graph.value<S, f32, [N]>, !graph.value<E, f32, []>) -> !graph.value<E, f32, [N]>
    %Wr = graph.gather %WT "rel" : !graph.tensor<R, f32, [N, K]> -> !graph.value<E, f32, [N, K]>
    %m = graph.matvec %s, %Wr : (!graph.value<E, f32, [N]>, !graph.value<E, f32, [N, K]>) -> !graph.value<E, f32, [K]>
    %out = graph.aggregate sum %m : !graph.value<E, f32, [K]> -> !graph.value<A, f32, [K]>
    func.return %out : !graph.value<A, f32, [K]>
  }
}

// CHECK-LABEL: func.func @grad_x
// CHECK:         [[Y:%.*]] = graph.materialize_pairs {{%.*}} "src" : !graph.value<E, f32, [K]> -> !graph.tensor<RS, f32, [K]>
// CHECK-NEXT:    [[YE:%.*]] = graph.gather [[Y]] "src_rel"
// CHECK-NEXT:    [[Q:%.*]] = graph.binary div [[YE]], %c : (!graph.value<E, f32, [K]>, !graph.value<E, f32, []>)
// CHECK-NEXT:    %out = graph.aggregate sum [[Q]]

// -----

// RGAT's query: x[v] @ W[rel(e)] per (destination, relation) pair; a sum of
// source and destination terms distributes, each half hoisted on its side.

builtin.module {
  func.func @ends(%x: !graph.tensor<V, f32, [K]>, %W: !graph.tensor<R, f32, [K, N]>) -> !graph.value<A, f32, [N]> attributes {graph.param_names = ["x", "W"], graph.result_names = ["out"], graph.result_types = [!graph.tensor<V, f32, [N]>], graph.single_result} {
    %xu = graph.gather %x "src" : !graph.tensor<V, f32, [K]> -> !graph.value<S, f32, [K]>
    %xv = graph.gather %x "dst" : !graph.tensor<V, f32, [K]> -> !graph.value<D, f32, [K]>
    %sum = graph.binary add %xu, %xv : (!graph.value<S, f32, [K]>, !graph.value<D, f32, [K]>) -> !graph.value<E, f32, [K]>
    %Wr = graph.gather %W "rel" : !graph.tensor<R, f32, [K, N]> -> !graph.value<E, f32, [K, N]>
    %m = graph.matvec %sum, %Wr : (!graph.value<E, f32, [K]>, !graph.value<E, f32, [K, N]>) -> !graph.value<E, f32, [N]>
    %out = graph.aggregate max %m : !graph.value<E, f32, [N]> -> !graph.value<A, f32, [N]>
    func.return %out : !graph.value<A, f32, [N]>
  }
}

// CHECK-LABEL: func.func @ends
// CHECK-DAG:     [[S:%.*]] = graph.materialize_pairs {{%.*}} "src" : !graph.value<E, f32, [N]> -> !graph.tensor<RS, f32, [N]>
// CHECK-DAG:     [[D:%.*]] = graph.materialize_pairs {{%.*}} "dst" : !graph.value<E, f32, [N]> -> !graph.tensor<RD, f32, [N]>
// CHECK-DAG:     [[SE:%.*]] = graph.gather [[S]] "src_rel"
// CHECK-DAG:     [[DE:%.*]] = graph.gather [[D]] "dst_rel"
// CHECK:         graph.binary add
// CHECK-NEXT:    %out = graph.aggregate max

// -----

// A kernel whose schedule says `relations per_edge` keeps its transforms per edge,
// and so does a product of both ends (no pair has it), and a one-element row.

builtin.module {
  func.func @scheduled(%x: !graph.tensor<V, f32, [K]>, %W: !graph.tensor<R, f32, [K, N]>) -> !graph.value<A, f32, [N]> attributes {graph.param_names = ["x", "W"], graph.result_names = ["out"], graph.result_types = [!graph.tensor<V, f32, [N]>], graph.single_result, graph.schedule = {"cpu.relations" = "per_edge"}} {
    %xu = graph.gather %x "src" : !graph.tensor<V, f32, [K]> -> !graph.value<S, f32, [K]>
    %Wr = graph.gather %W "rel" : !graph.tensor<R, f32, [K, N]> -> !graph.value<E, f32, [K, N]>
    %m = graph.matvec %xu, %Wr : (!graph.value<S, f32, [K]>, !graph.value<E, f32, [K, N]>) -> !graph.value<E, f32, [N]>
    %out = graph.aggregate sum %m : !graph.value<E, f32, [N]> -> !graph.value<A, f32, [N]>
    func.return %out : !graph.value<A, f32, [N]>
  }
  func.func @both_ends(%x: !graph.tensor<V, f32, [K]>, %W: !graph.tensor<R, f32, [K, N]>) -> !graph.value<A, f32, [N]> attributes {graph.param_names = ["x", "W"], graph.result_names = ["out"], graph.result_types = [!graph.tensor<V, f32, [N]>], graph.single_result} {
    %xu = graph.gather %x "src" : !graph.tensor<V, f32, [K]> -> !graph.value<S, f32, [K]>
    %xv = graph.gather %x "dst" : !graph.tensor<V, f32, [K]> -> !graph.value<D, f32, [K]>
    %p = graph.binary mul %xu, %xv : (!graph.value<S, f32, [K]>, !graph.value<D, f32, [K]>) -> !graph.value<E, f32, [K]>
    %Wr = graph.gather %W "rel" : !graph.tensor<R, f32, [K, N]> -> !graph.value<E, f32, [K, N]>
    %m = graph.matvec %p, %Wr : (!graph.value<E, f32, [K]>, !graph.value<E, f32, [K, N]>) -> !graph.value<E, f32, [N]>
    %out = graph.aggregate sum %m : !graph.value<E, f32, [N]> -> !graph.value<A, f32, [N]>
    func.return %out : !graph.value<A, f32, [N]>
  }
  func.func @narrow(%x: !graph.tensor<V, f32, [1]>, %W: !graph.tensor<R, f32, [1, N]>) -> !graph.value<A, f32, [N]> attributes {graph.param_names = ["x", "W"], graph.result_names = ["out"], graph.result_types = [!graph.tensor<V, f32, [N]>], graph.single_result} {
    %xu = graph.gather %x "src" : !graph.tensor<V, f32, [1]> -> !graph.value<S, f32, [1]>
    %Wr = graph.gather %W "rel" : !graph.tensor<R, f32, [1, N]> -> !graph.value<E, f32, [1, N]>
    %m = graph.matvec %xu, %Wr : (!graph.value<S, f32, [1]>, !graph.value<E, f32, [1, N]>) -> !graph.value<E, f32, [N]>
    %out = graph.aggregate sum %m : !graph.value<E, f32, [N]> -> !graph.value<A, f32, [N]>
    func.return %out : !graph.value<A, f32, [N]>
  }
}

// CHECK-LABEL: func.func @scheduled
// CHECK:         %m = graph.matvec %xu, %Wr
// CHECK-NOT:     graph.materialize_pairs
// CHECK-LABEL: func.func @both_ends
// CHECK:         %m = graph.matvec %p, %Wr
// CHECK-NOT:     graph.materialize_pairs
// CHECK-LABEL: func.func @narrow
// CHECK:         %m = graph.matvec %xu, %Wr
// CHECK-NOT:     graph.materialize_pairs

// ERR: gnnc-opt: error: relation-transform-first{form="diagonal"}: unknown form; use one of compact, per_edge

// -----

// The same transform written twice (a training forward returns a saved intermediate
// that repeats a definition): one pair sweep, both edge values read its rows.

builtin.module {
  func.func @twice(%x: !graph.tensor<V, f32, [K]>, %W: !graph.tensor<R, f32, [K, N]>) -> (!graph.value<A, f32, [N]>, !graph.value<A, f32, [N]>) attributes {graph.param_names = ["x", "W"], graph.result_names = ["out", "st0__"], graph.result_types = [!graph.tensor<V, f32, [N]>, !graph.tensor<V, f32, [N]>]} {
    %xu = graph.gather %x "src" : !graph.tensor<V, f32, [K]> -> !graph.value<S, f32, [K]>
    %Wr = graph.gather %W "rel" : !graph.tensor<R, f32, [K, N]> -> !graph.value<E, f32, [K, N]>
    %m = graph.matvec %xu, %Wr : (!graph.value<S, f32, [K]>, !graph.value<E, f32, [K, N]>) -> !graph.value<E, f32, [N]>
    %a = graph.aggregate sum %m : !graph.value<E, f32, [N]> -> !graph.value<A, f32, [N]>
    %xu2 = graph.gather %x "src" : !graph.tensor<V, f32, [K]> -> !graph.value<S, f32, [K]>
    %Wr2 = graph.gather %W "rel" : !graph.tensor<R, f32, [K, N]> -> !graph.value<E, f32, [K, N]>
    %m2 = graph.matvec %xu2, %Wr2 : (!graph.value<S, f32, [K]>, !graph.value<E, f32, [K, N]>) -> !graph.value<E, f32, [N]>
    %b = graph.aggregate max %m2 : !graph.value<E, f32, [N]> -> !graph.value<A, f32, [N]>
    func.return %a, %b : !graph.value<A, f32, [N]>, !graph.value<A, f32, [N]>
  }
}

// CHECK-LABEL: func.func @twice
// CHECK:         [[Y:%.*]] = graph.materialize_pairs %{{.*}} "src"
// CHECK-NOT:     graph.materialize_pairs
// CHECK:         [[YE:%.*]] = graph.gather [[Y]] "src_rel"
// CHECK-NOT:     graph.materialize_pairs
// CHECK:         graph.aggregate sum [[YE]]
// CHECK:         graph.aggregate max [[YE]]
