// RUN: gnnc-opt %s --split-input-file --verify-diagnostics -p vectorize-edges | filecheck %s
// RUN: gnnc-opt %s --split-input-file --verify-diagnostics -p 'vectorize-edges{lanes=16}' | filecheck %s --check-prefix=L16

// gcn_norm scheduled `vectorize edges 8`: the walk runs in chunks of up to 8
// in-edges. Per chunk, the scalar work (the edge's weight
// rsqrt(deg_out(u) * deg_in(v))) runs in one loop.lanes op, edge j on lane j,
// into an 8-element stack buffer; the rows then run edge after edge, reading
// their weight from it. The record says one walk qualifies.

builtin.module {
  func.func @gnnc_gcn_norm(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %x: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [\22F\22], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: true, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c0 = arith.constant 0 : index
    %F_i64 = memref.load %dims[%c0] : memref<?xi64>
    %F = arith.index_cast %F_i64 : i64 to index
    %c1 = arith.constant 1 : index
    %row = arith.muli %c1, %F : index
    %zero = arith.constant 0.000000e+00 : f32
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", vectorize_edges = 8 : i64} : memref<?xi64> {
    ^bb0(%v: index, %worker: index):
      %v_row = arith.muli %v, %row : index
      loop.for_feature %F dim "F" {
      ^bb0(%f: index):
        %at = arith.addi %v_row, %f : index
        memref.store %zero, %out[%at] : memref<?xf32>
        loop.yield
      }
      loop.for_in_edges %v in %in_indptr, %in_src, %in_eid : memref<?xi64>, memref<?xi64>, memref<?xi64> {
      ^bb0(%pos: index, %u: index, %e: index):
        %dout_u = memref.load %deg_out[%u] : memref<?xf32>
        %din_v = memref.load %deg_in[%v] : memref<?xf32>
        %dd = arith.mulf %dout_u, %din_v : f32
        %norm = math.rsqrt %dd : f32
        loop.for_feature %F dim "F" {
        ^bb0(%f_1: index):
          %o = arith.addi %v_row, %f_1 : index
          %acc = memref.load %out[%o] : memref<?xf32>
          %u_row = arith.muli %u, %row : index
          %i = arith.addi %u_row, %f_1 : index
          %xu = memref.load %x[%i] : memref<?xf32>
          %msg = arith.mulf %xu, %norm : f32
          %sum = arith.addf %acc, %msg : f32
          memref.store %sum, %out[%o] : memref<?xf32>
          loop.yield
        }
        loop.yield
      }
      loop.yield
    }
    func.return
  }
}

// CHECK-LABEL: func.func @gnnc_gcn_norm(
// CHECK-SAME:    \22lanes\22: {\22edge_ids\22: false, \22reducing\22: 0, \22sized\22: false, \22unit_dims\22: [], \22walks\22: 1}
// CHECK:         loop.for_dst {{.*}} schedule {parallel = "dst"}
// CHECK:           [[ONE:%.*]] = arith.constant 1 : index
// CHECK-NEXT:      [[W:%.*]] = arith.constant 8 : index
// CHECK-NEXT:      [[ZERO:%.*]] = arith.constant 0 : index
// CHECK-NEXT:      [[V1:%.*]] = arith.addi %v, [[ONE]] : index
// CHECK-NEXT:      [[LO64:%.*]] = memref.load %in_indptr[%v] : memref<?xi64>
// CHECK-NEXT:      [[HI64:%.*]] = memref.load %in_indptr{{\[}}[[V1]]{{\]}} : memref<?xi64>
// CHECK-NEXT:      [[LO:%.*]] = arith.index_cast [[LO64]] : i64 to index
// CHECK-NEXT:      [[HI:%.*]] = arith.index_cast [[HI64]] : i64 to index
// CHECK-NEXT:      [[BUF:%.*]] = memref.alloca() {alignment = 64 : i64} : memref<8xf32>
// CHECK-NEXT:      scf.for [[CHUNK:%.*]] = [[LO]] to [[HI]] step [[W]] {
// CHECK-NEXT:        [[LEFT:%.*]] = arith.subi [[HI]], [[CHUNK]] : index
// CHECK-NEXT:        [[N:%.*]] = arith.minsi [[LEFT]], [[W]] : index
// CHECK-NEXT:        loop.lanes [[N]] width 8 reduce [] {
// CHECK-NEXT:        ^bb0([[LANE:%.*]]: index):
// CHECK-NEXT:          [[POS:%.*]] = arith.addi [[CHUNK]], [[LANE]] : index
// CHECK-NEXT:          [[U64:%.*]] = memref.load %in_src{{\[}}[[POS]]{{\]}} : memref<?xi64>
// CHECK-NEXT:          [[U:%.*]] = arith.index_cast [[U64]] : i64 to index
// CHECK-NEXT:          {{%.*}} = memref.load %deg_out{{\[}}[[U]]{{\]}} : memref<?xf32>
// CHECK-NEXT:          {{%.*}} = memref.load %deg_in[%v] : memref<?xf32>
// CHECK-NEXT:          {{%.*}} = arith.mulf
// CHECK-NEXT:          [[NORM:%.*]] = math.rsqrt
// CHECK-NEXT:          memref.store [[NORM]], [[BUF]]{{\[}}[[LANE]]{{\]}} {gnnc.whole_vector} : memref<8xf32>
// CHECK-NEXT:          loop.yield
// CHECK-NEXT:        }
// CHECK-NEXT:        scf.for [[J:%.*]] = [[ZERO]] to [[N]] step [[ONE]] {
// CHECK-NEXT:          [[P:%.*]] = arith.addi [[CHUNK]], [[J]] : index
// CHECK-NEXT:          [[U64_2:%.*]] = memref.load %in_src{{\[}}[[P]]{{\]}} : memref<?xi64>
// CHECK-NEXT:          [[U2:%.*]] = arith.index_cast [[U64_2]] : i64 to index
// CHECK-NEXT:          [[WEIGHT:%.*]] = memref.load [[BUF]]{{\[}}[[J]]{{\]}} : memref<8xf32>
// CHECK-NEXT:          loop.for_feature %F dim "F" {
// CHECK:                 {{%.*}} = arith.muli [[U2]], %row : index
// CHECK:                 {{%.*}} = arith.mulf {{%.*}}, [[WEIGHT]] : f32
// CHECK:             } {gnnc.no_vectorize}
// CHECK-NOT:     loop.for_in_edges

// L16-LABEL: func.func @gnnc_gcn_norm(
// L16:         memref.alloca() {alignment = 64 : i64} : memref<16xf32>
// L16:         loop.lanes {{%.*}} width 16 reduce []

// -----

// Not scheduled: the walk stays, but the record counts the walks that would
// qualify (what the runtime's heuristic asks).

builtin.module {
  func.func @gnnc_gcn_norm_plain(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %x: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [\22F\22], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: true, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c0 = arith.constant 0 : index
    %F_i64 = memref.load %dims[%c0] : memref<?xi64>
    %F = arith.index_cast %F_i64 : i64 to index
    %c1 = arith.constant 1 : index
    %row = arith.muli %c1, %F : index
    %zero = arith.constant 0.000000e+00 : f32
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst"} : memref<?xi64> {
    ^bb0(%v: index, %worker: index):
      %v_row = arith.muli %v, %row : index
      loop.for_feature %F dim "F" {
      ^bb0(%f: index):
        %at = arith.addi %v_row, %f : index
        memref.store %zero, %out[%at] : memref<?xf32>
        loop.yield
      }
      loop.for_in_edges %v in %in_indptr, %in_src, %in_eid : memref<?xi64>, memref<?xi64>, memref<?xi64> {
      ^bb0(%pos: index, %u: index, %e: index):
        %dout_u = memref.load %deg_out[%u] : memref<?xf32>
        %din_v = memref.load %deg_in[%v] : memref<?xf32>
        %dd = arith.mulf %dout_u, %din_v : f32
        %norm = math.rsqrt %dd : f32
        loop.for_feature %F dim "F" {
        ^bb0(%f_1: index):
          %o = arith.addi %v_row, %f_1 : index
          %acc = memref.load %out[%o] : memref<?xf32>
          %u_row = arith.muli %u, %row : index
          %i = arith.addi %u_row, %f_1 : index
          %xu = memref.load %x[%i] : memref<?xf32>
          %msg = arith.mulf %xu, %norm : f32
          %sum = arith.addf %acc, %msg : f32
          memref.store %sum, %out[%o] : memref<?xf32>
          loop.yield
        }
        loop.yield
      }
      loop.yield
    }
    func.return
  }
}

// CHECK-LABEL: func.func @gnnc_gcn_norm_plain(
// CHECK-SAME:    \22lanes\22: {{.*}}\22walks\22: 1}
// CHECK-NOT:     loop.lanes
// CHECK:         loop.for_in_edges

// L16-LABEL: func.func @gnnc_gcn_norm_plain(
// L16:         loop.lanes {{%.*}} width 16 reduce []

// -----

// gcn's walk does nothing per edge outside its row but load w[e]: no scalar
// work for lanes, and the directive is refused.

builtin.module {
  func.func @gnnc_gcn(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %x: memref<?xf32> {llvm.noalias, llvm.readonly}, %w: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [\22F\22], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: true, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c0 = arith.constant 0 : index
    %F_i64 = memref.load %dims[%c0] : memref<?xi64>
    %F = arith.index_cast %F_i64 : i64 to index
    %c1 = arith.constant 1 : index
    %row = arith.muli %c1, %F : index
    %zero = arith.constant 0.000000e+00 : f32
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", vectorize_edges = 4 : i64} : memref<?xi64> {
    ^bb0(%v: index, %worker: index):
      %v_row = arith.muli %v, %row : index
      loop.for_feature %F dim "F" {
      ^bb0(%f: index):
        %at = arith.addi %v_row, %f : index
        memref.store %zero, %out[%at] : memref<?xf32>
        loop.yield
      }
      loop.for_in_edges %v in %in_indptr, %in_src, %in_eid : memref<?xi64>, memref<?xi64>, memref<?xi64> {
      ^bb0(%pos: index, %u: index, %e: index):
        %e_row = arith.muli %e, %c1 : index
        %we = memref.load %w[%e_row] : memref<?xf32>
        loop.for_feature %F dim "F" {
        ^bb0(%f_1: index):
          %o = arith.addi %v_row, %f_1 : index
          %acc = memref.load %out[%o] : memref<?xf32>
          %u_row = arith.muli %u, %row : index
          %i = arith.addi %u_row, %f_1 : index
          %xu = memref.load %x[%i] : memref<?xf32>
          %prod = arith.mulf %we, %xu : f32
          %sum = arith.addf %acc, %prod : f32
          memref.store %sum, %out[%o] : memref<?xf32>
          loop.yield
        }
        loop.yield
      }
      loop.yield
    }
    func.return
  }
}

// CHECK: @gnnc_gcn: vectorize edges 4: no in-edge walk of this kernel computes scalars per edge that could run in lanes
// L16:   @gnnc_gcn: vectorize edges 16: no in-edge walk of this kernel computes scalars per edge that could run in lanes
