// RUN: gnnc-opt %s --split-input-file -p prefetch-neighbors | filecheck %s
// RUN: gnnc-opt %s --split-input-file -p 'prefetch-neighbors{distance=3}' | filecheck %s --check-prefix=D3

// gcn, no `prefetch` entry: the default distance, 8 edges. At the top of each
// in-edge, the source 8 positions on (the last edge near the end) is read
// from in_src and every 64-byte line of its x row prefetched; w's row of the
// edge 8 positions on likewise, through in_eid.

builtin.module {
  func.func @gnnc_gcn(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %x: memref<?xf32> {llvm.noalias, llvm.readonly}, %w: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [\22F\22], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: false, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c0 = arith.constant 0 : index
    %F_i64 = memref.load %dims[%c0] : memref<?xi64>
    %F = arith.index_cast %F_i64 : i64 to index
    %c1 = arith.constant 1 : index
    %row = arith.muli %c1, %F : index
    %zero = arith.constant 0.000000e+00 : f32
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", order = "identity"} : memref<?xi64> {
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

// CHECK-LABEL: func.func @gnnc_gcn(
// CHECK:         loop.for_in_edges %v in %in_indptr, %in_src, %in_eid
// CHECK-NEXT:    ^bb0(%pos: index, %u: index, %e: index):
// CHECK-NEXT:      [[D:%.*]] = arith.constant 8 : index
// CHECK-NEXT:      [[ONE:%.*]] = arith.constant 1 : index
// CHECK-NEXT:      [[AHEAD:%.*]] = arith.addi %pos, [[D]] : index
// CHECK-NEXT:      [[LAST:%.*]] = arith.subi %num_edges, [[ONE]] : index
// CHECK-NEXT:      [[AT:%.*]] = arith.minsi [[AHEAD]], [[LAST]] : index
// CHECK-NEXT:      [[ZERO:%.*]] = arith.constant 0 : index
// CHECK-NEXT:      [[U64:%.*]] = memref.load %in_src{{\[}}[[AT]]{{\]}} : memref<?xi64>
// CHECK-NEXT:      [[U:%.*]] = arith.index_cast [[U64]] : i64 to index
// CHECK-NEXT:      [[LINE:%.*]] = arith.constant 16 : index
// CHECK-NEXT:      [[UROW:%.*]] = arith.muli [[U]], %row : index
// CHECK-NEXT:      scf.for [[L:%.*]] = [[ZERO]] to %row step [[LINE]] {
// CHECK-NEXT:        [[X:%.*]] = arith.addi [[UROW]], [[L]] : index
// CHECK-NEXT:        llvm_ext.prefetch %x{{\[}}[[X]]{{\]}} {write = false, locality = 3 : i32} : memref<?xf32>
// CHECK-NEXT:      }
// CHECK-NEXT:      [[E64:%.*]] = memref.load %in_eid{{\[}}[[AT]]{{\]}} : memref<?xi64>
// CHECK-NEXT:      [[E:%.*]] = arith.index_cast [[E64]] : i64 to index
// CHECK:           llvm_ext.prefetch %w
// CHECK:           %e_row = arith.muli %e, %c1 : index

// D3-LABEL: func.func @gnnc_gcn(
// D3:         loop.for_in_edges
// D3-NEXT:    ^bb0(
// D3-NEXT:      arith.constant 3 : index

// -----

// A sweep in a destination order of the runtime's (`sort degree`) also reads
// its destinations' rows at random: the pass asks order-destinations to
// prefetch them (`prefetch_destinations`, 4 positions ahead). Here the
// distance is the schedule's 2, and there is no source row to fetch.

builtin.module {
  func.func @gnnc_wsum(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %w: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: true, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c1 = arith.constant 1 : index
    %zero = arith.constant 0.000000e+00 : f32
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", order = "degree", prefetch = 2 : i64} : memref<?xi64> {
    ^bb0(%v: index, %worker: index):
      %v_row = arith.muli %v, %c1 : index
      memref.store %zero, %out[%v_row] : memref<?xf32>
      loop.for_in_edges %v in %in_indptr, %in_src, %in_eid : memref<?xi64>, memref<?xi64>, memref<?xi64> {
      ^bb0(%pos: index, %u: index, %e: index):
        %acc = memref.load %out[%v_row] : memref<?xf32>
        %e_row = arith.muli %e, %c1 : index
        %we = memref.load %w[%e_row] : memref<?xf32>
        %sum = arith.addf %acc, %we : f32
        memref.store %sum, %out[%v_row] : memref<?xf32>
        loop.yield
      }
      loop.yield
    }
    func.return
  }
}

// CHECK-LABEL: func.func @gnnc_wsum(
// CHECK:         schedule {parallel = "dst", order = "degree", prefetch_destinations = 4 : i64}
// CHECK:         loop.for_in_edges
// CHECK-NEXT:    ^bb0(
// CHECK-NEXT:      arith.constant 2 : index
// CHECK-NOT:       memref.load %in_src
// CHECK:           memref.load %in_eid
// CHECK:           llvm_ext.prefetch %w

// D3-LABEL: func.func @gnnc_wsum(
// D3:         prefetch_destinations = 4 : i64
// D3:         loop.for_in_edges
// D3-NEXT:    ^bb0(
// D3-NEXT:      arith.constant 3 : index

// -----

// `edges sorted` (edge_ids): w is read at the walk's own positions, in order;
// only the gathered x rows are prefetched.

builtin.module {
  func.func @gnnc_gcn(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %x: memref<?xf32> {llvm.noalias, llvm.readonly}, %w: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [\22F\22], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: true, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c0 = arith.constant 0 : index
    %F_i64 = memref.load %dims[%c0] : memref<?xi64>
    %F = arith.index_cast %F_i64 : i64 to index
    %c1 = arith.constant 1 : index
    %row = arith.muli %c1, %F : index
    %zero = arith.constant 0.000000e+00 : f32
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", order = "identity", edge_ids = "sorted"} : memref<?xi64> {
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

// CHECK-LABEL: func.func @gnnc_gcn(
// CHECK:         schedule {parallel = "dst", order = "identity", edge_ids = "sorted"}
// CHECK:         llvm_ext.prefetch %x
// CHECK-NOT:     llvm_ext.prefetch %w

// D3-LABEL: func.func @gnnc_gcn(
// D3:         llvm_ext.prefetch %x
// D3-NOT:     llvm_ext.prefetch %w

// -----

// `prefetch 0`: no prefetching; the entry is consumed all the same.

builtin.module {
  func.func @gnnc_gcn(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %x: memref<?xf32> {llvm.noalias, llvm.readonly}, %w: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [\22F\22], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: true, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c0 = arith.constant 0 : index
    %F_i64 = memref.load %dims[%c0] : memref<?xi64>
    %F = arith.index_cast %F_i64 : i64 to index
    %c1 = arith.constant 1 : index
    %row = arith.muli %c1, %F : index
    %zero = arith.constant 0.000000e+00 : f32
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", order = "identity", prefetch = 0 : i64} : memref<?xi64> {
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

// CHECK-LABEL: func.func @gnnc_gcn(
// CHECK:         schedule {parallel = "dst", order = "identity"}
// CHECK-NOT:     llvm_ext.prefetch

// D3-LABEL: func.func @gnnc_gcn(
// D3:         arith.constant 3 : index
// D3:         llvm_ext.prefetch %x
