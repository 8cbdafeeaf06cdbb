// RUN: gnnc-opt %s --split-input-file --verify-diagnostics -p tile-features | filecheck %s
// RUN: gnnc-opt %s --split-input-file --verify-diagnostics -p 'tile-features{size=8}' | filecheck %s --check-prefix=SIZE

// gcn scheduled `tile features 4`, as prefetch-neighbors left it: the sweep
// runs once per tile of F, its row loops and the row prefetch narrowed to the tile.

builtin.module {
  func.func @gnnc_gcn(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %x: memref<?xf32> {llvm.noalias, llvm.readonly}, %w: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [\22F\22], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: true, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c0 = arith.constant 0 : index
    %F_i64 = memref.load %dims[%c0] : memref<?xi64>
    %F = arith.index_cast %F_i64 : i64 to index
    %c1 = arith.constant 1 : index
    %row = arith.muli %c1, %F : index
    %zero = arith.constant 0.000000e+00 : f32
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", tile = 4 : i64} : memref<?xi64> {
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
        %c8 = arith.constant 8 : index
        %ahead = arith.addi %pos, %c8 : index
        %last = arith.subi %num_edges, %c1 : index
        %clamped = arith.minsi %ahead, %last : index
        %u_ahead_i64 = memref.load %in_src[%clamped] : memref<?xi64>
        %u_ahead = arith.index_cast %u_ahead_i64 : i64 to index
        %line = arith.constant 16 : index
        %u_ahead_row = arith.muli %u_ahead, %row : index
        scf.for %l = %c0 to %row step %line {
          %fetch = arith.addi %u_ahead_row, %l : index
          llvm_ext.prefetch %x[%fetch] {write = false, locality = 3 : i32} : memref<?xf32>
        }
        %we = memref.load %w[%e] : memref<?xf32>
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

// CHECK-LABEL: func.func @gnnc_gcn
// CHECK:       loop.for_tile %F by 4 dim "F" {
// CHECK-NEXT:  ^bb0([[START:%.*]]: index, [[WIDTH:%.*]]: index):
// CHECK-NEXT:    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst"}
// CHECK:           loop.for_feature [[WIDTH]] dim "F" {
// CHECK-NEXT:      ^bb0([[F:%.*]]: index):
// CHECK-NEXT:        [[COL:%.*]] = arith.addi [[F]], [[START]] : index
// CHECK-NEXT:        %at = arith.addi %v_row, [[COL]] : index
// CHECK:           loop.for_in_edges
// the prefetch of x[u] fetches the tile's columns of the row, not the whole row
// CHECK:             [[LO:%.*]] = arith.addi {{%.*}}, [[START]] : index
// CHECK-NEXT:        [[HI:%.*]] = arith.addi [[LO]], [[WIDTH]] : index
// CHECK-NEXT:        scf.for %l = [[LO]] to [[HI]] step %line {
// CHECK:             loop.for_feature [[WIDTH]] dim "F" {
// CHECK-NEXT:        ^bb0([[F1:%.*]]: index):
// CHECK-NEXT:          [[COL1:%.*]] = arith.addi [[F1]], [[START]] : index
// CHECK-NEXT:          %o = arith.addi %v_row, [[COL1]] : index
// CHECK:               %i = arith.addi %u_row, [[COL1]] : index

// SIZE-LABEL: func.func @gnnc_gcn
// SIZE:       loop.for_tile %F by 8 dim "F" {
// SIZE-NOT:   tile =

// -----

// A kernel without a feature axis has nothing to tile: refused.

builtin.module {
  func.func @gnnc_wsum(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %w: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: true, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", tile = 4 : i64} : memref<?xi64> {
    ^bb0(%v: index, %worker: index):
      loop.for_in_edges %v in %in_indptr, %in_src, %in_eid : memref<?xi64>, memref<?xi64>, memref<?xi64> {
      ^bb0(%pos: index, %u: index, %e: index):
        %acc = memref.load %out[%v] : memref<?xf32>
        %we = memref.load %w[%e] : memref<?xf32>
        %sum = arith.addf %acc, %we : f32
        memref.store %sum, %out[%v] : memref<?xf32>
        loop.yield
      }
      loop.yield
    }
    func.return
  }
}

// CHECK: tile features 4: the kernel has no loop over a feature axis 'F'
// SIZE:  tile features 8: the kernel has no loop over a feature axis 'F'

// -----

// No `tile` entry: the sweep is left alone; given a size, it is tiled all the same.

builtin.module {
  func.func @gnnc_gcn(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %x: memref<?xf32> {llvm.noalias, llvm.readonly}, %w: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [\22F\22], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: false, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c0 = arith.constant 0 : index
    %F_i64 = memref.load %dims[%c0] : memref<?xi64>
    %F = arith.index_cast %F_i64 : i64 to index
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst"} : memref<?xi64> {
    ^bb0(%v: index, %worker: index):
      loop.for_in_edges %v in %in_indptr, %in_src, %in_eid : memref<?xi64>, memref<?xi64>, memref<?xi64> {
      ^bb0(%pos: index, %u: index, %e: index):
        loop.for_feature %F dim "F" {
        ^bb0(%f: index):
          %i = arith.addi %u, %f : index
          %xu = memref.load %x[%i] : memref<?xf32>
          memref.store %xu, %out[%i] : memref<?xf32>
          loop.yield
        }
        loop.yield
      }
      loop.yield
    }
    func.return
  }
}

// CHECK-LABEL: func.func @gnnc_gcn
// CHECK-NOT:   loop.for_tile
// CHECK:       loop.for_dst {{.*}} schedule {parallel = "dst"}
// CHECK:       loop.for_feature %F dim "F"

// SIZE-LABEL: func.func @gnnc_gcn
// SIZE:       loop.for_tile %F by 8 dim "F" {
// SIZE:         loop.for_feature {{%.*}} dim "F"
