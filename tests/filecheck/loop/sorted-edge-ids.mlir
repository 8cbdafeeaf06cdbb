// RUN: gnnc-opt %s --split-input-file --verify-diagnostics -p sorted-edge-ids | filecheck %s
// RUN: gnnc-opt %s --split-input-file --verify-diagnostics -p 'sorted-edge-ids{sorted=true}' | filecheck %s --check-prefix=SORTED

// gcn scheduled `edges sorted`: the caller's edge ids are the in-CSR
// positions, so the walk addresses w by its position, not by in_eid; the
// record says so (the runtime refuses a graph whose edges are not sorted).

builtin.module {
  func.func @gnnc_gcn(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %x: memref<?xf32> {llvm.noalias, llvm.readonly}, %w: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [\22F\22], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: true, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c0 = arith.constant 0 : index
    %F_i64 = memref.load %dims[%c0] : memref<?xi64>
    %F = arith.index_cast %F_i64 : i64 to index
    %c1 = arith.constant 1 : index
    %row = arith.muli %c1, %F : index
    %zero = arith.constant 0.000000e+00 : f32
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", edge_ids = "sorted"} : memref<?xi64> {
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
// CHECK-SAME:    \22edges_sorted\22: true
// CHECK:         loop.for_dst {{.*}} schedule {parallel = "dst"}
// CHECK:           loop.for_in_edges %v in %in_indptr, %in_src, %in_eid
// CHECK-NEXT:      ^bb0(%pos: index, %u: index, %e: index):
// CHECK-NEXT:        %e_row = arith.muli %pos, %c1 : index
// CHECK-NEXT:        %we = memref.load %w[%e_row] : memref<?xf32>

// SORTED-LABEL: func.func @gnnc_gcn(
// SORTED-SAME:    \22edges_sorted\22: true
// SORTED:         %e_row = arith.muli %pos, %c1 : index

// -----

// No `edges sorted`: edge ids stay the user's; given sorted=true, every kernel takes positions.

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
// CHECK-NOT:     edges_sorted
// CHECK:         %e_row = arith.muli %e, %c1 : index

// SORTED-LABEL: func.func @gnnc_gcn(
// SORTED-SAME:    \22edges_sorted\22: true
// SORTED:         %e_row = arith.muli %pos, %c1 : index

// -----

// A sweep in a destination order walks the in-CSR in a layout of its own,
// where a position is not an edge id: the option is refused for it.

builtin.module {
  func.func @gnnc_gcn_ordered(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %x: memref<?xf32> {llvm.noalias, llvm.readonly}, %w: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [\22F\22], \22edge_order\22: null, \22groups\22: null, \22order\22: \22degree\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: true, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c0 = arith.constant 0 : index
    %F_i64 = memref.load %dims[%c0] : memref<?xi64>
    %F = arith.index_cast %F_i64 : i64 to index
    %c1 = arith.constant 1 : index
    %row = arith.muli %c1, %F : index
    %zero = arith.constant 0.000000e+00 : f32
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst"} : memref<?xi64> {
    ^bb0(%p: index, %worker: index):
      %v = loop.dst_at %dst_order[%p] : memref<?xi64>
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

// CHECK-LABEL: func.func @gnnc_gcn_ordered(
// CHECK:         %e_row = arith.muli %e, %c1 : index

// SORTED: sorted-edge-ids{sorted=true}: 'edges sorted' cannot be combined with the order kernel 'gnnc_gcn_ordered' walks its destinations or edges in
