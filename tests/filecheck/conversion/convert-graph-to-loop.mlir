// RUN: gnnc-opt %s --split-input-file --verify-diagnostics -p convert-graph-to-loop | filecheck %s
// RUN: gnnc-opt %s --split-input-file --verify-diagnostics -p 'convert-graph-to-loop{target=cuda}' | filecheck %s --check-prefix=CUDA
// RUN: gnnc-opt %s --split-input-file --verify-diagnostics -p 'convert-graph-to-loop{partition=2}' | filecheck %s --check-prefix=PART
// RUN: not gnnc-opt %s -p 'convert-graph-to-loop{simd=100}' 2>&1 | filecheck %s --check-prefix=ERR

// ERR: gnnc-opt: error: convert-graph-to-loop{simd=100}: expected '128', '256' or '512' after 'simd', found '100'

// gcn: out[v] = sum(w[e] * x[u]) becomes @gnnc_gcn with the gnnc ABI (the graph
// arguments, then x, w and out as flat buffers) and one destination sweep:
// zero the row, then per in-edge (pos, u, e) load w[e] and add w[e] * x[u] to it.

builtin.module {
  func.func @gcn(%x: !graph.tensor<V, f32, [F]>, %w: !graph.tensor<E, f32, []>) -> !graph.value<A, f32, [F]> attributes {graph.param_names = ["x", "w"], graph.result_names = ["out"], graph.result_types = [!graph.tensor<V, f32, [F]>], graph.single_result} {
    %we = graph.gather %w "edge" : !graph.tensor<E, f32, []> -> !graph.value<E, f32, []>
    %xu = graph.gather %x "src" : !graph.tensor<V, f32, [F]> -> !graph.value<S, f32, [F]>
    %msg = graph.binary mul %we, %xu : (!graph.value<E, f32, []>, !graph.value<S, f32, [F]>) -> !graph.value<E, f32, [F]>
    %out = graph.aggregate sum %msg : !graph.value<E, f32, [F]> -> !graph.value<A, f32, [F]>
    func.return %out : !graph.value<A, f32, [F]>
  }
}

// CHECK-LABEL: func.func @gnnc_gcn(
// CHECK-SAME:    [[NV:%[0-9]+]]: index, {{%[0-9]+}}: index, [[NT:%[0-9]+]]: index, [[NB:%[0-9]+]]: index,
// CHECK-SAME:    [[BLOCKS:%[0-9]+]]: memref<?xi64> {llvm.noalias, llvm.readonly}, {{%[0-9]+}}: memref<?xi64> {llvm.noalias, llvm.readonly},
// CHECK-SAME:    [[INDPTR:%[0-9]+]]: memref<?xi64> {llvm.noalias, llvm.readonly}, [[SRC:%[0-9]+]]: memref<?xi64> {llvm.noalias, llvm.readonly}, [[EID:%[0-9]+]]: memref<?xi64> {llvm.noalias, llvm.readonly},
// CHECK-SAME:    {{%[0-9]+}}: memref<?xf32> {llvm.noalias, llvm.readonly}, {{%[0-9]+}}: memref<?xf32> {llvm.noalias, llvm.readonly},
// CHECK-SAME:    [[DIMS:%[0-9]+]]: memref<?xi64> {llvm.noalias, llvm.readonly}, {{%[0-9]+}}: memref<?xf32> {llvm.noalias},
// CHECK-SAME:    [[X:%[0-9]+]]: memref<?xf32> {llvm.noalias, llvm.readonly}, [[W:%[0-9]+]]: memref<?xf32> {llvm.noalias, llvm.readonly}, [[OUT:%[0-9]+]]: memref<?xf32> {llvm.noalias})
// CHECK-SAME:    gnnc.ir.abi = "{{.*}}\22dims\22: [\22F\22]{{.*}}\22partitions\22: null, \22phases\22: [{{.*}}\22edge_walks\22: 1{{.*}}\22schedule_given\22: false{{.*}}\22source_sweep\22: false, \22stream\22: false
// CHECK:         [[F64:%[0-9]+]] = memref.load [[DIMS]][{{%[0-9]+}}] : memref<?xi64>
// CHECK-NEXT:    [[F:%[0-9]+]] = arith.index_cast [[F64]] : i64 to index
// CHECK:         loop.for_dst [[NV]] blocks [[BLOCKS]]{{\[}}[[NB]]{{\]}} threads [[NT]] schedule {parallel = "dst", order = "identity"} : memref<?xi64> {
// CHECK-NEXT:    ^bb0([[V:%[0-9]+]]: index, {{%[0-9]+}}: index):
// CHECK:           loop.for_feature [[F]] dim "F" {
// CHECK:             memref.store {{%[0-9]+}}, [[OUT]][{{%[0-9]+}}] : memref<?xf32>
// CHECK:           loop.for_in_edges [[V]] in [[INDPTR]], [[SRC]], [[EID]] : memref<?xi64>, memref<?xi64>, memref<?xi64> {
// CHECK-NEXT:      ^bb0({{%[0-9]+}}: index, [[U:%[0-9]+]]: index, [[E:%[0-9]+]]: index):
// CHECK-NEXT:        [[WI:%[0-9]+]] = arith.muli [[E]], {{%[0-9]+}} : index
// CHECK-NEXT:        [[WE:%[0-9]+]] = memref.load [[W]]{{\[}}[[WI]]{{\]}} : memref<?xf32>
// CHECK-NEXT:        loop.for_feature [[F]] dim "F" {
// CHECK-NEXT:        ^bb0([[I:%[0-9]+]]: index):
// CHECK-NEXT:          [[O:%[0-9]+]] = arith.addi {{%[0-9]+}}, [[I]] : index
// CHECK-NEXT:          [[ACC:%[0-9]+]] = memref.load [[OUT]]{{\[}}[[O]]{{\]}} : memref<?xf32>
// CHECK-NEXT:          [[UROW:%[0-9]+]] = arith.muli [[U]], {{%[0-9]+}} : index
// CHECK-NEXT:          [[XI:%[0-9]+]] = arith.addi [[UROW]], [[I]] : index
// CHECK-NEXT:          [[XU:%[0-9]+]] = memref.load [[X]]{{\[}}[[XI]]{{\]}} : memref<?xf32>
// CHECK-NEXT:          [[MSG:%[0-9]+]] = arith.mulf [[WE]], [[XU]] : f32
// CHECK-NEXT:          [[SUM:%[0-9]+]] = arith.addf [[ACC]], [[MSG]] : f32
// CHECK-NEXT:          memref.store [[SUM]], [[OUT]]{{\[}}[[O]]{{\]}} : memref<?xf32>
// CHECK-NOT:     graph.

// CUDA-LABEL: func.func @gnnc_gcn(
// CUDA:         loop.for_dst {{.*}} schedule {parallel = "dst", order = "identity"}
// CUDA:           loop.for_in_edges

// A partition option gives the kernel the partitioned in-CSR (part_indptr,
// part_src, part_eid after acc_rows) and its sweep the `partition` entry that
// partition-sources implements; the ABI record says the schedule was given.
// PART-LABEL: func.func @gnnc_gcn(
// PART-SAME:    memref<?xf32> {llvm.noalias}, {{%[0-9]+}}: memref<?xf32> {llvm.noalias}, {{%[0-9]+}}: memref<?xi64> {llvm.noalias, llvm.readonly}, {{%[0-9]+}}: memref<?xi64> {llvm.noalias, llvm.readonly}, {{%[0-9]+}}: memref<?xi64> {llvm.noalias, llvm.readonly})
// PART-SAME:    \22partitions\22: 2,{{.*}}\22schedule_given\22: true
// PART:         loop.for_dst {{.*}} schedule {parallel = "dst", order = "identity", partition = 2 : i64}

// -----

// mlp_aggr after transform-before-gather (y = x @ W read at u and v). On the
// CPU, y is computed by a sweep over the source rows (`parallel = "sources"`,
// its blocks in src_blocks) before the destination sweep; the cuda lowering
// computes it in a destination sweep of its own instead.

builtin.module {
  func.func @mlp_aggr(%x: !graph.tensor<V, f32, [D1]>, %W: !graph.tensor<P, f32, [D1, D2]>) -> !graph.value<A, f32, [D2]> attributes {graph.param_names = ["x", "W"], graph.result_names = ["out"], graph.result_types = [!graph.tensor<V, f32, [D2]>], graph.single_result} {
    %xv = graph.gather %x "dst" : !graph.tensor<V, f32, [D1]> -> !graph.value<D, f32, [D1]>
    %Wp = graph.gather %W "param" : !graph.tensor<P, f32, [D1, D2]> -> !graph.value<P, f32, [D1, D2]>
    %xW = graph.matvec %xv, %Wp : (!graph.value<D, f32, [D1]>, !graph.value<P, f32, [D1, D2]>) -> !graph.value<D, f32, [D2]>
    %y = graph.materialize %xW : !graph.value<D, f32, [D2]> -> !graph.tensor<V, f32, [D2]>
    %yu = graph.gather %y "src" : !graph.tensor<V, f32, [D2]> -> !graph.value<S, f32, [D2]>
    %yv = graph.gather %y "dst" : !graph.tensor<V, f32, [D2]> -> !graph.value<D, f32, [D2]>
    %e = graph.binary add %yu, %yv : (!graph.value<S, f32, [D2]>, !graph.value<D, f32, [D2]>) -> !graph.value<E, f32, [D2]>
    %r = graph.unary relu %e : !graph.value<E, f32, [D2]> -> !graph.value<E, f32, [D2]>
    %out = graph.aggregate max %r : !graph.value<E, f32, [D2]> -> !graph.value<A, f32, [D2]>
    func.return %out : !graph.value<A, f32, [D2]>
  }
}

// CHECK-LABEL: func.func @gnnc_mlp_aggr(
// CHECK-SAME:    \22dims\22: [\22D1\22, \22D2\22]{{.*}}\22source_sweep\22: true
// CHECK:         loop.for_dst {{%[0-9]+}} blocks {{%[0-9]+}}{{\[}}{{%[0-9]+}}{{\]}} threads {{%[0-9]+}} schedule {parallel = "sources", order = "identity", vectorize = 32 : i64}
// CHECK:           loop.for_feature {{%[0-9]+}} dim "D1" {
// CHECK-NEXT:      ^bb0({{%[0-9]+}}: index):
// CHECK:             loop.for_feature {{%[0-9]+}} dim "D2" {
// CHECK:         loop.for_dst {{.*}} schedule {parallel = "dst", order = "identity"}
// CHECK:           loop.for_in_edges
// CHECK-NOT:     loop.for_dst

// CUDA-LABEL: func.func @gnnc_mlp_aggr(
// CUDA-SAME:    \22source_sweep\22: false
// CUDA-NOT:     parallel = "sources"
// CUDA:         loop.for_dst {{.*}} schedule {parallel = "dst", order = "identity"}
// CUDA-NOT:       loop.for_in_edges
// CUDA:           loop.for_feature {{%[0-9]+}} dim "D1"
// CUDA:         loop.for_dst {{.*}} schedule {parallel = "dst", order = "identity"}
// CUDA:           loop.for_in_edges

// PART-LABEL: func.func @gnnc_mlp_aggr(
// PART:         schedule {parallel = "sources", order = "identity", vectorize = 32 : i64}
// PART:         schedule {parallel = "dst", order = "identity", partition = 2 : i64}

// -----

// `stream outputs`: the row is built in the worker's row of acc_rows (the
// argument after out) and written to out once, whole, by a streaming copy.
// Source partitions build a row in pieces: the option is refused for this kernel.

builtin.module {
  func.func @gcn_stream(%x: !graph.tensor<V, f32, [F]>, %w: !graph.tensor<E, f32, []>) -> !graph.value<A, f32, [F]> attributes {graph.param_names = ["x", "w"], graph.result_names = ["out"], graph.result_types = [!graph.tensor<V, f32, [F]>], graph.single_result, graph.schedule = {cpu.stream = "outputs"}} {
    %we = graph.gather %w "edge" : !graph.tensor<E, f32, []> -> !graph.value<E, f32, []>
    %xu = graph.gather %x "src" : !graph.tensor<V, f32, [F]> -> !graph.value<S, f32, [F]>
    %msg = graph.binary mul %we, %xu : (!graph.value<E, f32, []>, !graph.value<S, f32, [F]>) -> !graph.value<E, f32, [F]>
    %out = graph.aggregate sum %msg : !graph.value<E, f32, [F]> -> !graph.value<A, f32, [F]>
    func.return %out : !graph.value<A, f32, [F]>
  }
}

// CHECK-LABEL: func.func @gnnc_gcn_stream(
// CHECK-SAME:    [[OUT:%[0-9]+]]: memref<?xf32> {llvm.noalias}, [[ACC:%[0-9]+]]: memref<?xf32> {llvm.noalias})
// CHECK-SAME:    \22schedule_given\22: true{{.*}}\22stream\22: true
// CHECK:         loop.for_dst {{.*}} {
// CHECK-NEXT:    ^bb0([[V:%[0-9]+]]: index, {{%[0-9]+}}: index):
// CHECK:           [[BASE:%[0-9]+]] = arith.addi {{%[0-9]+}}, {{%[0-9]+}} : index
// CHECK-NEXT:      loop.for_feature
// CHECK:           loop.for_in_edges
// CHECK:               memref.store {{%[0-9]+}}, [[ACC]]
// CHECK:           [[VROW:%[0-9]+]] = arith.muli [[V]], [[ROW:%[0-9]+]] : index
// CHECK-NEXT:      llvm_ext.stream_copy [[ACC]]{{\[}}[[BASE]]{{\]}} to [[OUT]]{{\[}}[[VROW]]{{\]}} count [[ROW]] : memref<?xf32>, memref<?xf32>

// PART: convert-graph-to-loop{partition=2}: 'partition src' cannot be combined with 'stream outputs' (the schedule of kernel 'gcn_stream')

// -----

// rgcn after segment-matmul: the pairs' transforms come first, in a sweep over
// tiles of 2 pairs of one relation (its bounds from src_pair_tiles, the second
// pair clamped to the tile's last, each x row loaded once per k and each W
// element once per tile, two accumulator rows), then the destination sweep
// gathers each edge's pair row at src_edge_pair[e] and divides it by its count.

builtin.module {
  func.func @rgcn(%x: !graph.tensor<V, f32, [K]>, %W: !graph.tensor<R, f32, [K, N]>) -> !graph.value<A, f32, [N]> attributes {graph.param_names = ["x", "W"], graph.result_names = ["out"], graph.result_types = [!graph.tensor<V, f32, [N]>], graph.single_result} {
    %y = graph.segment_matmul %x, %W "src" rows 2 : (!graph.tensor<V, f32, [K]>, !graph.tensor<R, f32, [K, N]>) -> !graph.tensor<RS, f32, [N]>
    %ye = graph.gather %y "src_rel" : !graph.tensor<RS, f32, [N]> -> !graph.value<E, f32, [N]>
    %c = graph.degree "in" "dst" {relation} : !graph.value<E, f32, []>
    %q = graph.binary div %ye, %c : (!graph.value<E, f32, [N]>, !graph.value<E, f32, []>) -> !graph.value<E, f32, [N]>
    %out = graph.aggregate sum %q : !graph.value<E, f32, [N]> -> !graph.value<A, f32, [N]>
    func.return %out : !graph.value<A, f32, [N]>
  }
}

// CHECK-LABEL: func.func @gnnc_rgcn(
// CHECK-SAME:    [[X:%13]]: memref<?xf32> {llvm.noalias, llvm.readonly}, [[W:%14]]: memref<?xf32> {llvm.noalias, llvm.readonly}, [[OUT:%15]]: memref<?xf32> {llvm.noalias}, [[Y:%16]]: memref<?xf32> {llvm.noalias},
// CHECK-SAME:    [[REL_DEG:%17]]: memref<?xf32> {llvm.noalias, llvm.readonly}, {{%18}}: memref<?xf32> {llvm.noalias, llvm.readonly},
// CHECK-SAME:    [[META:%19]]: memref<?xi64> {llvm.noalias, llvm.readonly}, {{%20}}: memref<?xi64> {llvm.noalias, llvm.readonly}, [[VERTEX:%21]]: memref<?xi64> {llvm.noalias, llvm.readonly}, [[REL:%22]]: memref<?xi64> {llvm.noalias, llvm.readonly}, [[EDGE_PAIR:%23]]: memref<?xi64> {llvm.noalias, llvm.readonly}, [[TILES:%24]]: memref<?xi64> {llvm.noalias, llvm.readonly}, [[TILE_BLOCKS:%25]]: memref<?xi64> {llvm.noalias, llvm.readonly})
// CHECK-SAME:    \22pair_rows\22: 2, \22pairs\22: [\22src\22]
// CHECK-SAME:    \22temps\22: [{\22domain\22: \22RS\22, \22reduced\22: \22K\22, \22shape\22: [\22N\22]}]
// CHECK:         loop.for_dst {{%[0-9]+}} blocks [[TILE_BLOCKS]][{{%[0-9]+}}] threads %2 schedule {parallel = "pairs", order = "identity", vectorize = 16 : i64}
// CHECK-NEXT:    ^bb0([[T:%[0-9]+]]: index, {{%[0-9]+}}: index):
// CHECK:           [[LO64:%[0-9]+]] = memref.load [[TILES]]{{\[}}[[T]]{{\]}}
// CHECK:           memref.load [[REL]]
// CHECK:           memref.load [[VERTEX]]
// CHECK:           arith.minui
// CHECK:           memref.load [[VERTEX]]
// CHECK:           loop.for_feature {{%[0-9]+}} dim "K"
// CHECK-NEXT:      ^bb0([[K:%[0-9]+]]: index):
// CHECK:             memref.load [[X]]
// CHECK:             memref.load [[X]]
// CHECK:             loop.for_feature {{%[0-9]+}} dim "N"
// CHECK:               [[WE:%[0-9]+]] = memref.load [[W]]
// CHECK:               arith.mulf {{%[0-9]+}}, [[WE]]
// CHECK:               arith.mulf {{%[0-9]+}}, [[WE]]
// CHECK-NOT:           memref.load [[W]]
// CHECK:           memref.store {{%[0-9]+}}, [[Y]]
// CHECK:           memref.store {{%[0-9]+}}, [[Y]]
// CHECK:         loop.for_dst %0 blocks %4[%3] threads %2 schedule {parallel = "dst", order = "identity"}
// CHECK:           loop.for_in_edges
// CHECK-NEXT:      ^bb0({{%[0-9]+}}: index, {{%[0-9]+}}: index, [[E:%[0-9]+]]: index):
// CHECK-NEXT:        memref.load [[REL_DEG]]{{\[}}[[E]]{{\]}}
// CHECK-NEXT:        [[P64:%[0-9]+]] = memref.load [[EDGE_PAIR]]{{\[}}[[E]]{{\]}}
// CHECK-NEXT:        [[P:%[0-9]+]] = arith.index_cast [[P64]] : i64 to index

// -----

// A computed value read at permuted indices: `outer(o, a)` reads a[h, l] for every d
// inside the dot's D loop. a (here one exponential) is computed once per edge into
// scratch, in an H x L nest, and the dot reads it there; o[h, d] is read once per (h, d),
// outside the sum over L.

builtin.module {
  func.func @outer_rhs(%val: !graph.tensor<V, f32, [H, D, L]>, %s: !graph.tensor<E, f32, [H, L]>, %oned: !graph.tensor<P, f32, [H, D]>) -> !graph.value<A, f32, [H, D]> attributes {graph.param_names = ["val", "s", "oned"], graph.result_names = ["out"], graph.result_types = [!graph.tensor<V, f32, [H, D]>], graph.single_result} {
    %se = graph.gather %s "edge" : !graph.tensor<E, f32, [H, L]> -> !graph.value<E, f32, [H, L]>
    %a = graph.unary exp %se : !graph.value<E, f32, [H, L]> -> !graph.value<E, f32, [H, L]>
    %o = graph.gather %oned "param" : !graph.tensor<P, f32, [H, D]> -> !graph.value<P, f32, [H, D]>
    %w = graph.outer %o, %a : (!graph.value<P, f32, [H, D]>, !graph.value<E, f32, [H, L]>) -> !graph.value<E, f32, [H, D, L]>
    %vu = graph.gather %val "src" : !graph.tensor<V, f32, [H, D, L]> -> !graph.value<S, f32, [H, D, L]>
    %m = graph.dot %vu, %w : (!graph.value<S, f32, [H, D, L]>, !graph.value<E, f32, [H, D, L]>) -> !graph.value<E, f32, [H, D]>
    %out = graph.aggregate sum %m : !graph.value<E, f32, [H, D]> -> !graph.value<A, f32, [H, D]>
    func.return %out : !graph.value<A, f32, [H, D]>
  }
}

// CHECK-LABEL: func.func @gnnc_outer_rhs(
// CHECK:         loop.for_in_edges
// CHECK-NEXT:    ^bb0({{%[0-9]+}}: index, {{%[0-9]+}}: index, {{%[0-9]+}}: index):
// CHECK-NEXT:      [[A:%[0-9]+]] = arith.addi {{%[0-9]+}}, {{%[0-9]+}} {gnnc.scratch_base} : index
// CHECK-NEXT:      loop.for_feature {{%[0-9]+}} dim "H" {
// CHECK:             loop.for_feature {{%[0-9]+}} dim "L" {
// CHECK:               [[EX:%[0-9]+]] = math.exp
// CHECK:               memref.store [[EX]], [[SCRATCH:%[0-9]+]][
// CHECK:           loop.for_feature {{%[0-9]+}} dim "H" {
// CHECK:             loop.for_feature {{%[0-9]+}} dim "D" {
// CHECK:               [[O:%[0-9]+]] = memref.load
// CHECK-NEXT:          scf.for
// CHECK-NOT:             math.exp
// CHECK:                 memref.load [[SCRATCH]]
// CHECK-NOT:             math.exp
// CHECK:                 arith.mulf [[O]],
// CHECK:               {{gnnc.dot_reduction}}

// The cuda grids keep it inline (SCRATCH_VALUE_TARGETS): warp lanes split the feature loops.
// CUDA-LABEL: func.func @gnnc_outer_rhs(
// CUDA:         loop.for_in_edges
// CUDA-NOT:       math.exp
// CUDA:           scf.for
// CUDA:             math.exp

// -----

// A costly value two nests read (two dots of one exponential): computed once into scratch,
// not once in each dot's nest.

builtin.module {
  func.func @shared_exp(%s: !graph.tensor<E, f32, [H, L]>, %p: !graph.tensor<P, f32, [H, L]>, %q: !graph.tensor<P, f32, [H, L]>) -> !graph.value<A, f32, [H]> attributes {graph.param_names = ["s", "p", "q"], graph.result_names = ["out"], graph.result_types = [!graph.tensor<V, f32, [H]>], graph.single_result} {
    %se = graph.gather %s "edge" : !graph.tensor<E, f32, [H, L]> -> !graph.value<E, f32, [H, L]>
    %x = graph.unary exp %se : !graph.value<E, f32, [H, L]> -> !graph.value<E, f32, [H, L]>
    %pp = graph.gather %p "param" : !graph.tensor<P, f32, [H, L]> -> !graph.value<P, f32, [H, L]>
    %qq = graph.gather %q "param" : !graph.tensor<P, f32, [H, L]> -> !graph.value<P, f32, [H, L]>
    %d1 = graph.dot %x, %pp : (!graph.value<E, f32, [H, L]>, !graph.value<P, f32, [H, L]>) -> !graph.value<E, f32, [H]>
    %d2 = graph.dot %x, %qq : (!graph.value<E, f32, [H, L]>, !graph.value<P, f32, [H, L]>) -> !graph.value<E, f32, [H]>
    %m = graph.binary div %d1, %d2 : (!graph.value<E, f32, [H]>, !graph.value<E, f32, [H]>) -> !graph.value<E, f32, [H]>
    %out = graph.aggregate sum %m : !graph.value<E, f32, [H]> -> !graph.value<A, f32, [H]>
    func.return %out : !graph.value<A, f32, [H]>
  }
}

// CHECK-LABEL: func.func @gnnc_shared_exp(
// CHECK:         loop.for_in_edges
// CHECK:           loop.for_feature {{%[0-9]+}} dim "L" {
// CHECK:             math.exp
// CHECK:           scf.for
// CHECK-NOT:         math.exp
// CHECK:           scf.for
// CHECK-NOT:       math.exp
// CHECK:           loop.yield
