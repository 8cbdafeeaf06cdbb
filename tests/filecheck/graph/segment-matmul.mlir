// RUN: gnnc-opt %s --split-input-file -p segment-matmul | filecheck %s
// RUN: gnnc-opt %s --split-input-file -p 'segment-matmul{rows=2}' | filecheck %s --check-prefix=ROWS
// RUN: gnnc-opt %s --split-input-file -p 'segment-matmul{narrow-rows=4}' | filecheck %s --check-prefix=NARROW
// RUN: not gnnc-opt %s -p 'segment-matmul{rows=0}' 2>&1 | filecheck %s --check-prefix=ERR
// RUN: not gnnc-opt %s -p 'segment-matmul{narrow-rows=17}' 2>&1 | filecheck %s --check-prefix=ERR-NARROW

// rgcn after relation-transform-first, its sizes compiled in: x[u] @ W[rel(e)] per
// (source, relation) pair. The pairs of one relation are a contiguous run of rows,
// so their transforms are one dense product X_r @ W[r], `rows` pairs at a time.

builtin.module {
  func.func @rgcn(%x: !graph.tensor<V, f32, [K]>, %W: !graph.tensor<R, f32, [K, N]>) -> !graph.value<A, f32, [N]> attributes {graph.param_names = ["x", "W"], graph.result_names = ["out"], graph.result_types = [!graph.tensor<V, f32, [N]>], graph.single_result, graph.schedule = {"cpu.specialize" = "K 64 N 32"}} {
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
// CHECK-NEXT:    [[Y:%.*]] = graph.segment_matmul %x, %W "src" rows 4 : (!graph.tensor<V, f32, [K]>, !graph.tensor<R, f32, [K, N]>) -> !graph.tensor<RS, f32, [N]>
// CHECK-NEXT:    %ye = graph.gather [[Y]] "src_rel"
// CHECK-NOT:     graph.matvec
// CHECK-NOT:     graph.materialize_pairs

// ROWS-LABEL: func.func @rgcn
// ROWS-NEXT:    graph.segment_matmul %x, %W "src" rows 2

// -----

// A pair value that is more than a row times a relation's matrix keeps its
// per-pair sweep, and so does a product whose sizes are known only at run time;
// a destination side's transform becomes a product too.

builtin.module {
  func.func @scaled(%x: !graph.tensor<V, f32, [K]>, %W: !graph.tensor<R, f32, [K, N]>) -> !graph.value<A, f32, [N]> attributes {graph.param_names = ["x", "W"], graph.result_names = ["out"], graph.result_types = [!graph.tensor<V, f32, [N]>], graph.single_result, graph.schedule = {"cpu.specialize" = "K 64 N 32"}} {
    %xv = graph.gather %x "dst" : !graph.tensor<V, f32, [K]> -> !graph.value<D, f32, [K]>
    %r = graph.unary relu %xv : !graph.value<D, f32, [K]> -> !graph.value<D, f32, [K]>
    %Wr = graph.gather %W "rel" : !graph.tensor<R, f32, [K, N]> -> !graph.value<E, f32, [K, N]>
    %t = graph.matvec %r, %Wr : (!graph.value<D, f32, [K]>, !graph.value<E, f32, [K, N]>) -> !graph.value<E, f32, [N]>
    %y = graph.materialize_pairs %t "src" : !graph.value<E, f32, [N]> -> !graph.tensor<RS, f32, [N]>
    %ye = graph.gather %y "src_rel" : !graph.tensor<RS, f32, [N]> -> !graph.value<E, f32, [N]>
    %d = graph.materialize_pairs %t "dst" : !graph.value<E, f32, [N]> -> !graph.tensor<RD, f32, [N]>
    %de = graph.gather %d "dst_rel" : !graph.tensor<RD, f32, [N]> -> !graph.value<E, f32, [N]>
    %s = graph.binary add %ye, %de : (!graph.value<E, f32, [N]>, !graph.value<E, f32, [N]>) -> !graph.value<E, f32, [N]>
    %out = graph.aggregate sum %s : !graph.value<E, f32, [N]> -> !graph.value<A, f32, [N]>
    func.return %out : !graph.value<A, f32, [N]>
  }
  func.func @query(%x: !graph.tensor<V, f32, [16]>, %W: !graph.tensor<R, f32, [16, 8]>) -> !graph.value<A, f32, [8]> attributes {graph.param_names = ["x", "W"], graph.result_names = ["out"], graph.result_types = [!graph.tensor<V, f32, [8]>], graph.single_result} {
    %xv = graph.gather %x "dst" : !graph.tensor<V, f32, [16]> -> !graph.value<D, f32, [16]>
    %Wr = graph.gather %W "rel" : !graph.tensor<R, f32, [16, 8]> -> !graph.value<E, f32, [16, 8]>
    %t = graph.matvec %xv, %Wr : (!graph.value<D, f32, [16]>, !graph.value<E, f32, [16, 8]>) -> !graph.value<E, f32, [8]>
    %d = graph.materialize_pairs %t "dst" : !graph.value<E, f32, [8]> -> !graph.tensor<RD, f32, [8]>
    %de = graph.gather %d "dst_rel" : !graph.tensor<RD, f32, [8]> -> !graph.value<E, f32, [8]>
    %out = graph.aggregate max %de : !graph.value<E, f32, [8]> -> !graph.value<A, f32, [8]>
    func.return %out : !graph.value<A, f32, [8]>
  }
  func.func @unsized(%x: !graph.tensor<V, f32, [K]>, %W: !graph.tensor<R, f32, [K, N]>) -> !graph.value<A, f32, [N]> attributes {graph.param_names = ["x", "W"], graph.result_names = ["out"], graph.result_types = [!graph.tensor<V, f32, [N]>], graph.single_result} {
    %xv = graph.gather %x "dst" : !graph.tensor<V, f32, [K]> -> !graph.value<D, f32, [K]>
    %Wr = graph.gather %W "rel" : !graph.tensor<R, f32, [K, N]> -> !graph.value<E, f32, [K, N]>
    %t = graph.matvec %xv, %Wr : (!graph.value<D, f32, [K]>, !graph.value<E, f32, [K, N]>) -> !graph.value<E, f32, [N]>
    %d = graph.materialize_pairs %t "dst" : !graph.value<E, f32, [N]> -> !graph.tensor<RD, f32, [N]>
    %de = graph.gather %d "dst_rel" : !graph.tensor<RD, f32, [N]> -> !graph.value<E, f32, [N]>
    %out = graph.aggregate max %de : !graph.value<E, f32, [N]> -> !graph.value<A, f32, [N]>
    func.return %out : !graph.value<A, f32, [N]>
  }
}

// CHECK-LABEL: func.func @scaled
// CHECK:         %t = graph.matvec %r, %Wr
// CHECK-NEXT:    %y = graph.materialize_pairs %t "src"
// CHECK:         %d = graph.materialize_pairs %t "dst"
// CHECK-NOT:     graph.segment_matmul
// CHECK-LABEL: func.func @query
// CHECK-NEXT:    [[D:%.*]] = graph.segment_matmul %x, %W "dst" rows 4 : (!graph.tensor<V, f32, [16]>, !graph.tensor<R, f32, [16, 8]>) -> !graph.tensor<RD, f32, [8]>
// CHECK-NEXT:    %de = graph.gather [[D]] "dst_rel"
// CHECK-LABEL: func.func @unsized
// CHECK:         %d = graph.materialize_pairs %t "dst"
// CHECK-NOT:     graph.segment_matmul

// -----

// A transform of 4 columns (RGAT's scores, one per head): tiles of one pair, unless the
// pass is given `rows` or `narrow-rows` (the driver gives 4 where the target CPU's LLVM
// tuning permutes a packed tile's rows rather than gather them: not AMD's Zen).

builtin.module {
  func.func @scores(%x: !graph.tensor<V, f32, [K]>, %W: !graph.tensor<R, f32, [K, A]>) -> !graph.value<A, f32, [A]> attributes {graph.param_names = ["x", "W"], graph.result_names = ["out"], graph.result_types = [!graph.tensor<V, f32, [A]>], graph.single_result, graph.schedule = {"cpu.specialize" = "K 64 A 4"}} {
    %xv = graph.gather %x "dst" : !graph.tensor<V, f32, [K]> -> !graph.value<D, f32, [K]>
    %Wr = graph.gather %W "rel" : !graph.tensor<R, f32, [K, A]> -> !graph.value<E, f32, [K, A]>
    %t = graph.matvec %xv, %Wr : (!graph.value<D, f32, [K]>, !graph.value<E, f32, [K, A]>) -> !graph.value<E, f32, [A]>
    %y = graph.materialize_pairs %t "src" : !graph.value<E, f32, [A]> -> !graph.tensor<RS, f32, [A]>
    %ye = graph.gather %y "src_rel" : !graph.tensor<RS, f32, [A]> -> !graph.value<E, f32, [A]>
    %out = graph.aggregate sum %ye : !graph.value<E, f32, [A]> -> !graph.value<A, f32, [A]>
    func.return %out : !graph.value<A, f32, [A]>
  }
}

// CHECK-LABEL: func.func @scores
// CHECK-NEXT:    graph.segment_matmul %x, %W "src" rows 1 :
// ROWS-LABEL:  func.func @scores
// ROWS-NEXT:     graph.segment_matmul %x, %W "src" rows 2 :
// NARROW-LABEL:  func.func @scores
// NARROW-NEXT:     graph.segment_matmul %x, %W "src" rows 4 :


// ERR: gnnc-opt: error: segment-matmul{rows=0}: rows must be an integer from 1 to 16
// ERR-NARROW: gnnc-opt: error: segment-matmul{narrow_rows=17}: narrow-rows must be an integer from 1 to 16
