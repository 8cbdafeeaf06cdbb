// RUN: gnnc-opt %s --split-input-file --verify-diagnostics -p hilbert-edge-order | filecheck %s

// out[e] = el[u] + er[v] scheduled `order edges hilbert`: the sweep runs over
// the E positions of the runtime's Hilbert-ordered edge list; at position p,
// the destination is hilbert_dst[p] (loop.dst_at), the source hilbert_src[p],
// the edge id hilbert_eid[p], and the in-edge walk is that one edge.

builtin.module {
  func.func @gnnc_edge(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %el: memref<?xf32> {llvm.noalias, llvm.readonly}, %er: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}, %hilbert_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %hilbert_dst: memref<?xi64> {llvm.noalias, llvm.readonly}, %hilbert_eid: memref<?xi64> {llvm.noalias, llvm.readonly}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [], \22edge_order\22: \22hilbert\22, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: true, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", order = "identity", edges = "hilbert"} : memref<?xi64> {
    ^bb0(%v: index, %worker: index):
      loop.for_in_edges %v in %in_indptr, %in_src, %in_eid : memref<?xi64>, memref<?xi64>, memref<?xi64> {
      ^bb0(%pos: index, %u: index, %e: index):
        %e_row = arith.muli %e, %c1 : index
        %u_row = arith.muli %u, %c1 : index
        %elu = memref.load %el[%u_row] : memref<?xf32>
        %v_row = arith.muli %v, %c1 : index
        %erv = memref.load %er[%v_row] : memref<?xf32>
        %s = arith.addf %elu, %erv : f32
        memref.store %s, %out[%e_row] : memref<?xf32>
        loop.yield
      }
      loop.yield
    }
    func.return
  }
}

// CHECK-LABEL: func.func @gnnc_edge(
// CHECK:         loop.for_dst %num_edges blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", order = "identity"}
// CHECK-NEXT:    ^bb0([[P:%.*]]: index, %worker: index):
// CHECK-NEXT:      [[V:%.*]] = loop.dst_at %hilbert_dst{{\[}}[[P]]{{\]}} : memref<?xi64>
// CHECK-NEXT:      [[U64:%.*]] = memref.load %hilbert_src{{\[}}[[P]]{{\]}} : memref<?xi64>
// CHECK-NEXT:      [[E64:%.*]] = memref.load %hilbert_eid{{\[}}[[P]]{{\]}} : memref<?xi64>
// CHECK-NEXT:      %u = arith.index_cast [[U64]] : i64 to index
// CHECK-NEXT:      %e = arith.index_cast [[E64]] : i64 to index
// CHECK-NEXT:      %e_row = arith.muli %e, %c1 : index
// CHECK-NEXT:      %u_row = arith.muli %u, %c1 : index
// CHECK-NEXT:      %elu = memref.load %el[%u_row] : memref<?xf32>
// CHECK-NEXT:      %v_row = arith.muli [[V]], %c1 : index
// CHECK-NEXT:      %erv = memref.load %er[%v_row] : memref<?xf32>
// CHECK-NEXT:      %s = arith.addf %elu, %erv : f32
// CHECK-NEXT:      memref.store %s, %out[%e_row] : memref<?xf32>
// CHECK-NEXT:      loop.yield
// CHECK-NOT:     loop.for_in_edges

// -----

// A destination that aggregates over its in-edges cannot be visited edge by
// edge, in any order: refused.

builtin.module {
  func.func @gnnc_edge_sum(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %el: memref<?xf32> {llvm.noalias, llvm.readonly}, %er: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}, %hilbert_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %hilbert_dst: memref<?xi64> {llvm.noalias, llvm.readonly}, %hilbert_eid: memref<?xi64> {llvm.noalias, llvm.readonly}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [], \22edge_order\22: \22hilbert\22, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: true, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", order = "identity", edges = "hilbert"} : memref<?xi64> {
    ^bb0(%v: index, %worker: index):
      %zero = arith.constant 0.000000e+00 : f32
      %v_row_0 = arith.muli %v, %c1 : index
      memref.store %zero, %out[%v_row_0] : memref<?xf32>
      loop.for_in_edges %v in %in_indptr, %in_src, %in_eid : memref<?xi64>, memref<?xi64>, memref<?xi64> {
      ^bb0(%pos: index, %u: index, %e: index):
        %e_row = arith.muli %e, %c1 : index
        %u_row = arith.muli %u, %c1 : index
        %elu = memref.load %el[%u_row] : memref<?xf32>
        %v_row = arith.muli %v, %c1 : index
        %erv = memref.load %er[%v_row] : memref<?xf32>
        %s = arith.addf %elu, %erv : f32
        %acc = memref.load %out[%v_row] : memref<?xf32>
        %sum = arith.addf %acc, %s : f32
        memref.store %sum, %out[%v_row] : memref<?xf32>
        loop.yield
      }
      loop.yield
    }
    func.return
  }
}

// CHECK: order edges hilbert: needs an edge-wise kernel (results per edge, no aggregation or softmax); this kernel aggregates at its destinations

// -----

// The Hilbert list fixes the traversal: a destination order is refused.

builtin.module {
  func.func @gnnc_edge_sorted(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %el: memref<?xf32> {llvm.noalias, llvm.readonly}, %er: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}, %hilbert_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %hilbert_dst: memref<?xi64> {llvm.noalias, llvm.readonly}, %hilbert_eid: memref<?xi64> {llvm.noalias, llvm.readonly}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [], \22edge_order\22: \22hilbert\22, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: true, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", order = "degree", edges = "hilbert"} : memref<?xi64> {
    ^bb0(%v: index, %worker: index):
      loop.for_in_edges %v in %in_indptr, %in_src, %in_eid : memref<?xi64>, memref<?xi64>, memref<?xi64> {
      ^bb0(%pos: index, %u: index, %e: index):
        %e_row = arith.muli %e, %c1 : index
        %u_row = arith.muli %u, %c1 : index
        %elu = memref.load %el[%u_row] : memref<?xf32>
        %v_row = arith.muli %v, %c1 : index
        %erv = memref.load %er[%v_row] : memref<?xf32>
        %s = arith.addf %elu, %erv : f32
        memref.store %s, %out[%e_row] : memref<?xf32>
        loop.yield
      }
      loop.yield
    }
    func.return
  }
}

// CHECK: 'order edges hilbert' and 'sort degree' cannot be combined: choose one
