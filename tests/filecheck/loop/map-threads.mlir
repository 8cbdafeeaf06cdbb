// RUN: gnnc-opt %s --split-input-file --verify-diagnostics -p map-threads | filecheck %s
// RUN: gnnc-opt %s --split-input-file --verify-diagnostics -p 'map-threads{strategy=thread_edge group=2}' | filecheck %s --check-prefix=EDGE
// RUN: not gnnc-opt %s -p 'map-threads{group=2}' 2>&1 | filecheck %s --check-prefix=ERR

// ERR: gnnc-opt: error: map-threads{group=2}: give the mapping's strategy too (strategy=thread_vertex, ...)

// out[v] = sum(w[e]) lowered for cuda, no mapping given: thread_vertex. Thread
// g = block * 256 + thread handles destination g (group 1), if g < V, with its
// in-edges in order. The ABI record gets the grid the runtime launches.

builtin.module {
  func.func @gnnc_wsum(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %w: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: false, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %zero = arith.constant 0.000000e+00 : f32
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", order = "identity"} : memref<?xi64> {
    ^bb0(%v: index, %worker: index):
      memref.store %zero, %out[%v] : memref<?xf32>
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

// CHECK-LABEL: func.func @gnnc_wsum(
// CHECK-SAME:    \22grid\22: {\22block_size\22: 256, \22dst_scratch\22: false, \22grids\22: [{\22group\22: 1, \22over\22: \22V\22}], \22group\22: 1, \22hybrid\22: null, \22lanes\22: 1, \22mapping\22: \22thread_vertex\22, \22schedule_given\22: false}
// CHECK:         loop.grid blocks {{%.*}} threads 256 mapping thread_vertex {
// CHECK-NEXT:    ^bb0([[B:%.*]]: index, [[T:%.*]]: index):
// CHECK-NEXT:      [[BASE:%.*]] = arith.muli [[B]], [[BS:%.*]] : index
// CHECK-NEXT:      [[G:%.*]] = arith.addi [[BASE]], [[T]] : index
// CHECK:           scf.for [[K:%.*]] = {{%.*}} to [[GROUP:%.*]] step {{%.*}} {
// CHECK-NEXT:        [[V:%.*]] = arith.addi {{%.*}}, [[K]] : index
// CHECK-NEXT:        [[IN:%.*]] = arith.cmpi ult, [[V]], %num_vertices : index
// CHECK-NEXT:        scf.if [[IN]] {
// CHECK-NEXT:          memref.store %zero, %out{{\[}}[[V]]{{\]}} : memref<?xf32>
// CHECK-NEXT:          loop.for_in_edges [[V]] in %in_indptr, %in_src, %in_eid
// CHECK-NOT:     loop.for_dst

// thread_edge, 2 in-CSR positions per thread: a vertex grid zeroes the rows,
// then an edge grid finds each position's destination by binary search in
// in_indptr and adds w[e] to it atomically.
// EDGE-LABEL: func.func @gnnc_wsum(
// EDGE-SAME:    \22grids\22: [{\22group\22: 1, \22over\22: \22V\22}, {\22group\22: 2, \22over\22: \22E\22}], \22group\22: 2,{{.*}}\22mapping\22: \22thread_edge\22, \22schedule_given\22: true
// EDGE:         loop.grid blocks {{%.*}} threads 256 mapping thread_vertex {
// EDGE:             memref.store %zero, %out
// EDGE-NOT:         loop.for_in_edges
// EDGE:         loop.grid blocks {{%.*}} threads 256 mapping thread_edge {
// EDGE:           scf.for {{%.*}} = {{%.*}} to {{%.*}} step {{%.*}} {
// EDGE-NEXT:        [[POS:%.*]] = arith.addi {{%.*}}, {{%.*}} : index
// EDGE-NEXT:        {{%.*}} = arith.cmpi ult, [[POS]], %num_edges : index
// EDGE:             [[DST:%.*]], {{%.*}} = scf.for
// EDGE:               memref.load %in_indptr
// EDGE:             memref.load %in_eid{{\[}}[[POS]]{{\]}}
// EDGE:             [[WE:%.*]] = memref.load %w
// EDGE-NEXT:        llvm_ext.atomic_rmw "fadd" %out{{\[}}[[DST]]{{\]}}, [[WE]] : memref<?xf32>, f32
// EDGE-NOT:     loop.for_

// -----

// gcn whose cuda schedule says `map warp_vertex` (gnnc.cuda_map): warp
// g / 32 handles a destination, its lanes (g % 32) the columns lane,
// lane + 32, ... of each row, for the zeroing and per in-edge.

builtin.module {
  func.func @gnnc_gcn(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %x: memref<?xf32> {llvm.noalias, llvm.readonly}, %w: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [\22F\22], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: false, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}", gnnc.cuda_map = "warp_vertex"} {
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

// CHECK-LABEL: func.func @gnnc_gcn(
// CHECK-SAME:    \22lanes\22: 32, \22mapping\22: \22warp_vertex\22, \22schedule_given\22: true
// CHECK-NOT:     gnnc.cuda_map
// CHECK:         [[WARP:%.*]] = arith.constant 32 : index
// CHECK:         loop.grid blocks {{%.*}} threads 256 mapping warp_vertex {
// CHECK-NEXT:    ^bb0([[B:%.*]]: index, [[T:%.*]]: index):
// CHECK-NEXT:      [[BASE:%.*]] = arith.muli [[B]], {{%.*}} : index
// CHECK-NEXT:      [[G:%.*]] = arith.addi [[BASE]], [[T]] : index
// CHECK-NEXT:      [[W:%.*]] = arith.divui [[G]], [[WARP]] : index
// CHECK-NEXT:      [[LANE:%.*]] = arith.remui [[G]], [[WARP]] : index
// CHECK:           scf.for [[COL:%.*]] = [[LANE]] to {{%.*}} step {{%.*}} {
// CHECK:               memref.store %zero, %out
// CHECK:           loop.for_in_edges
// CHECK:             scf.for {{%.*}} = [[LANE]] to {{%.*}} step {{%.*}} {
// CHECK:                   arith.mulf %we, {{%.*}} : f32
// CHECK-NOT:     loop.for_dst

// EDGE-LABEL: func.func @gnnc_gcn(
// EDGE-SAME:    \22mapping\22: \22thread_edge\22
// EDGE:         loop.grid {{.*}} mapping thread_vertex
// EDGE:         loop.grid {{.*}} mapping thread_edge
// EDGE:           llvm_ext.atomic_rmw "fadd" %out

// -----

// A CPU destination order has no cuda mapping: refused.

builtin.module {
  func.func @gnnc_wsum(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %w: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: false, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %zero = arith.constant 0.000000e+00 : f32
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", order = "degree"} : memref<?xi64> {
    ^bb0(%v: index, %worker: index):
      memref.store %zero, %out[%v] : memref<?xf32>
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

// CHECK: destination order 'degree' is not implemented for the cuda target
// EDGE:  destination order 'degree' is not implemented for the cuda target
