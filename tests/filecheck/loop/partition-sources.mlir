// RUN: gnnc-opt %s --split-input-file --verify-diagnostics -p partition-sources | filecheck %s

// gcn scheduled `partition src 2`: the sweep runs once per source partition
// p (loop.for_partition 2, a barrier between partitions). The walk reads
// partition p's in-CSR: row p of part_indptr (V + 1 offsets a row), part_src,
// part_eid. The row is zeroed in the first partition only and what follows
// the walk runs in the last only; the accumulator stays in the output row.

builtin.module {
  func.func @gnnc_gcn(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %x: memref<?xf32> {llvm.noalias, llvm.readonly}, %w: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}, %acc_rows: memref<?xf32> {llvm.noalias}, %part_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %part_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %part_eid: memref<?xi64> {llvm.noalias, llvm.readonly}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [\22F\22], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: 2, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: true, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c0 = arith.constant 0 : index
    %F_i64 = memref.load %dims[%c0] : memref<?xi64>
    %F = arith.index_cast %F_i64 : i64 to index
    %c1 = arith.constant 1 : index
    %row = arith.muli %c1, %F : index
    %zero = arith.constant 0.000000e+00 : f32
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", partition = 2 : i64} : memref<?xi64> {
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
      %first = memref.load %in_indptr[%v] : memref<?xi64>
      %v1 = arith.addi %v, %c1 : index
      %end = memref.load %in_indptr[%v1] : memref<?xi64>
      %deg_i64 = arith.subi %end, %first : i64
      %deg = arith.index_cast %deg_i64 : i64 to index
      loop.yield
    }
    func.return
  }
}

// CHECK-LABEL: func.func @gnnc_gcn(
// CHECK:         loop.for_partition 2 {
// CHECK-NEXT:    ^bb0([[P:%.*]]: index):
// CHECK-NEXT:      [[ZERO:%.*]] = arith.constant 0 : index
// CHECK-NEXT:      [[LASTP:%.*]] = arith.constant 1 : index
// CHECK-NEXT:      [[ISFIRST:%.*]] = arith.cmpi eq, [[P]], [[ZERO]] : index
// CHECK-NEXT:      [[ISLAST:%.*]] = arith.cmpi eq, [[P]], [[LASTP]] : index
// CHECK-NEXT:      loop.for_dst %num_vertices {{.*}} schedule {parallel = "dst"}
// CHECK-NEXT:      ^bb0(%v: index, %worker: index):
// CHECK-NEXT:        [[ONE:%.*]] = arith.constant 1 : index
// CHECK-NEXT:        [[ROWLEN:%.*]] = arith.addi %num_vertices, [[ONE]] : index
// CHECK-NEXT:        [[ROWP:%.*]] = arith.muli [[P]], [[ROWLEN]] : index
// CHECK-NEXT:        [[AT:%.*]] = arith.addi [[ROWP]], %v : index
// CHECK-NEXT:        %v_row = arith.muli %v, %row : index
// CHECK-NEXT:        scf.if [[ISFIRST]] {
// CHECK-NEXT:          loop.for_feature %F dim "F" {
// CHECK:                 memref.store %zero, %out
// CHECK:             loop.for_in_edges [[AT]] in %part_indptr, %part_src, %part_eid
// CHECK:               memref.store %sum, %out
// CHECK:             scf.if [[ISLAST]] {
// CHECK-NEXT:          %first = memref.load %in_indptr[%v]
// CHECK-NOT:     partition =

// -----

// A sweep with no in-edge walk has no sources to partition: refused.

builtin.module {
  func.func @gnnc_nowalk(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %out: memref<?xf32> {llvm.noalias}, %acc_rows: memref<?xf32> {llvm.noalias}, %part_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %part_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %part_eid: memref<?xi64> {llvm.noalias, llvm.readonly}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: 2, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: true, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", partition = 2 : i64} : memref<?xi64> {
    ^bb0(%v: index, %worker: index):
      %zero = arith.constant 0.000000e+00 : f32
      memref.store %zero, %out[%v] : memref<?xf32>
      loop.yield
    }
    func.return
  }
}

// CHECK: partition src 2: the kernel walks no in-edges

// -----

// `sort degree` with an edge result (out[e] = x[u]): the destination comes
// from loop.dst_at and only the partitioned walk's row reads it. It stays
// outside the first partition's guard (it was moved into it, and the IR
// failed to verify after convert-loop-to-scf).

builtin.module {
  func.func @gnnc_copy(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %x: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}, %acc_rows: memref<?xf32> {llvm.noalias}, %part_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %part_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %part_eid: memref<?xi64> {llvm.noalias, llvm.readonly}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [], \22edge_order\22: null, \22groups\22: null, \22order\22: \22degree\22, \22partitions\22: 2, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: true, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c1 = arith.constant 1 : index
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", partition = 2 : i64} : memref<?xi64> {
    ^bb0(%i: index, %worker: index):
      %v = loop.dst_at %dst_order[%i] : memref<?xi64>
      loop.for_in_edges %v in %in_indptr, %in_src, %in_eid : memref<?xi64>, memref<?xi64>, memref<?xi64> {
      ^bb0(%pos: index, %u: index, %e: index):
        %e_row = arith.muli %e, %c1 : index
        %u_row = arith.muli %u, %c1 : index
        %xu = memref.load %x[%u_row] : memref<?xf32>
        memref.store %xu, %out[%e_row] : memref<?xf32>
        loop.yield
      }
      loop.yield
    }
    func.return
  }
}

// CHECK-LABEL: func.func @gnnc_copy(
// CHECK:         loop.for_partition 2 {
// CHECK:           loop.for_dst
// CHECK-NEXT:      ^bb0(%i: index, %worker: index):
// CHECK-NEXT:        %v = loop.dst_at %dst_order[%i] : memref<?xi64>
// CHECK:             [[AT:%.*]] = arith.addi {{%.*}}, %v : index
// CHECK-NOT:         scf.if
// CHECK:             loop.for_in_edges [[AT]] in %part_indptr, %part_src, %part_eid
