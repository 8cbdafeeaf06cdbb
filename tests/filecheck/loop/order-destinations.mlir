// RUN: gnnc-opt %s --split-input-file -p order-destinations | filecheck %s
// RUN: gnnc-opt %s --split-input-file -p 'order-destinations{order=rcm}' | filecheck %s --check-prefix=RCM

// gcn scheduled `sort degree`, as prefetch-neighbors left it: the sweep runs
// over positions, each mapped to its destination by the runtime's dst_order
// (loop.dst_at); the destination's rows are addressed through it, while the
// in-edge walk keeps the position (the runtime lays the in-CSR out in the
// processing order: the record's ordered_edges). The out row of the
// destination 4 positions on is prefetched for writing.

builtin.module {
  func.func @gnnc_gcn(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %x: memref<?xf32> {llvm.noalias, llvm.readonly}, %w: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [\22F\22], \22edge_order\22: null, \22groups\22: null, \22order\22: \22degree\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: true, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c0 = arith.constant 0 : index
    %F_i64 = memref.load %dims[%c0] : memref<?xi64>
    %F = arith.index_cast %F_i64 : i64 to index
    %c1 = arith.constant 1 : index
    %row = arith.muli %c1, %F : index
    %zero = arith.constant 0.000000e+00 : f32
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", order = "degree", prefetch_destinations = 4 : i64} : memref<?xi64> {
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
// CHECK-SAME:    \22order\22: \22degree\22, \22ordered_edges\22: true
// CHECK:         loop.for_dst %num_vertices {{.*}} schedule {parallel = "dst"}
// CHECK-NEXT:    ^bb0([[P:%.*]]: index, %worker: index):
// CHECK-NEXT:      [[V:%.*]] = loop.dst_at %dst_order{{\[}}[[P]]{{\]}} : memref<?xi64>
// CHECK-NEXT:      [[AHEAD:%.*]] = arith.constant {gnnc.destination_prefetch} 4 : index
// CHECK:           [[LATER:%.*]] = arith.addi [[P]], [[AHEAD]] {gnnc.destination_prefetch} : index
// CHECK:           [[CLAMPED:%.*]] = arith.minsi [[LATER]], {{%.*}} {gnnc.destination_prefetch} : index
// CHECK-NEXT:      [[VNEXT:%.*]] = loop.dst_at %dst_order{{\[}}[[CLAMPED]]{{\]}} {gnnc.destination_prefetch}
// CHECK:             llvm_ext.prefetch %out{{\[}}{{%.*}}{{\]}} {write = true, locality = 3 : i32}
// CHECK:           %v_row = arith.muli [[V]], %row : index
// CHECK:           loop.for_in_edges [[P]] in %in_indptr, %in_src, %in_eid
// CHECK-NOT:     prefetch_destinations

// RCM-LABEL: func.func @gnnc_gcn(
// RCM-SAME:    \22order\22: \22rcm\22, \22ordered_edges\22: true
// RCM:         loop.for_dst {{.*}} schedule {parallel = "dst"}
// RCM-NEXT:    ^bb0([[P:%.*]]: index, %worker: index):
// RCM-NEXT:      loop.dst_at %dst_order{{\[}}[[P]]{{\]}}

// -----

// The identity order needs nothing: the sweep's positions are its destinations.
// Given an order, every kernel takes it, and the record names it for the runtime.

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
// CHECK-NOT:     ordered_edges
// CHECK:         schedule {parallel = "dst"}
// CHECK-NOT:     loop.dst_at

// RCM-LABEL: func.func @gnnc_gcn(
// RCM-SAME:    \22order\22: \22rcm\22, \22ordered_edges\22: true
// RCM:         loop.dst_at %dst_order
// RCM-NOT:     llvm_ext.prefetch %out
