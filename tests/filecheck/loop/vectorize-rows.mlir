// RUN: gnnc-opt %s --split-input-file --verify-diagnostics -p vectorize-rows | filecheck %s
// RUN: gnnc-opt %s --split-input-file --verify-diagnostics -p 'vectorize-rows{width=4}' | filecheck %s --check-prefix=W4

// gcn scheduled `vectorize 8`: a destination's work runs once per 8-wide
// slice of its row (F - F mod 8 columns, in an scf.for stepping by 8, the
// feature loops at the constant width 8 and shifted by the slice's offset),
// then once for the remaining F mod 8 columns, if any.

builtin.module {
  func.func @gnnc_gcn(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %x: memref<?xf32> {llvm.noalias, llvm.readonly}, %w: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [\22F\22], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: true, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c0 = arith.constant 0 : index
    %F_i64 = memref.load %dims[%c0] : memref<?xi64>
    %F = arith.index_cast %F_i64 : i64 to index
    %c1 = arith.constant 1 : index
    %row = arith.muli %c1, %F : index
    %zero = arith.constant 0.000000e+00 : f32
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", vectorize = 8 : i64} : memref<?xi64> {
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
// CHECK:         loop.for_dst {{.*}} schedule {parallel = "dst"}
// CHECK-NEXT:    ^bb0(%v: index, %worker: index):
// CHECK-NEXT:      [[ZERO:%.*]] = arith.constant 0 : index
// CHECK-NEXT:      [[W:%.*]] = arith.constant 8 : index
// CHECK-NEXT:      [[REM:%.*]] = arith.remsi %F, [[W]] : index
// CHECK-NEXT:      [[FULL:%.*]] = arith.subi %F, [[REM]] : index
// CHECK-NEXT:      [[ANY:%.*]] = arith.cmpi slt, [[FULL]], %F : index
// CHECK-NEXT:      scf.for [[OFF:%.*]] = [[ZERO]] to [[FULL]] step [[W]] {
// CHECK-NEXT:        [[VROW:%.*]] = arith.muli %v, %row : index
// CHECK-NEXT:        loop.for_feature [[W]] dim "F" {
// CHECK-NEXT:        ^bb0([[F:%.*]]: index):
// CHECK-NEXT:          [[COL:%.*]] = arith.addi [[F]], [[OFF]] : index
// CHECK:             loop.for_in_edges %v
// CHECK:               loop.for_feature [[W]] dim "F" {
// CHECK-NEXT:          ^bb0([[F2:%.*]]: index):
// CHECK-NEXT:            [[COL2:%.*]] = arith.addi [[F2]], [[OFF]] : index
// CHECK:           scf.if [[ANY]] {
// CHECK-NEXT:        {{%.*}} = arith.muli %v, %row : index
// CHECK-NEXT:        loop.for_feature [[REM]] dim "F" {
// CHECK-NEXT:        ^bb0([[F3:%.*]]: index):
// CHECK-NEXT:          {{%.*}} = arith.addi [[F3]], [[FULL]] : index
// CHECK:             loop.for_in_edges %v
// CHECK:               loop.for_feature [[REM]] dim "F" {
// CHECK-NOT:     vectorize =

// W4-LABEL: func.func @gnnc_gcn(
// W4:         arith.constant 4 : index
// W4-NEXT:    arith.remsi %F

// -----

// No `vectorize` entry: the row stays whole; given a width, it is sliced.

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
// CHECK-NOT:     arith.remsi
// CHECK:         loop.for_feature %F dim "F"

// W4-LABEL: func.func @gnnc_gcn(
// W4:         arith.constant 4 : index
// W4-NEXT:    arith.remsi %F

// -----

// A reduction along the row axis (a dot over F) cannot be cut into slices: refused.

builtin.module {
  func.func @gnnc_dot(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %q: memref<?xf32> {llvm.noalias, llvm.readonly}, %k: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [\22F\22], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: true, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %F_i64 = memref.load %dims[%c0] : memref<?xi64>
    %F = arith.index_cast %F_i64 : i64 to index
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", vectorize = 8 : i64} : memref<?xi64> {
    ^bb0(%v: index, %worker: index):
      loop.for_in_edges %v in %in_indptr, %in_src, %in_eid : memref<?xi64>, memref<?xi64>, memref<?xi64> {
      ^bb0(%pos: index, %u: index, %e: index):
        %zero = arith.constant 0.000000e+00 : f32
        %d = scf.for %f = %c0 to %F step %c1 iter_args(%acc = %zero) -> (f32) {
          %qv = memref.load %q[%f] : memref<?xf32>
          %ku = memref.load %k[%f] : memref<?xf32>
          %p = arith.mulf %qv, %ku : f32
          %next = arith.addf %acc, %p : f32
          scf.yield %next : f32
        }
        memref.store %d, %out[%e] : memref<?xf32>
        loop.for_feature %F dim "F" {
        ^bb0(%g: index):
          memref.store %d, %out[%g] : memref<?xf32>
          loop.yield
        }
        loop.yield
      }
      loop.yield
    }
    func.return
  }
}

// CHECK: vectorize 8: the kernel reduces over the feature axis 'F' (a dot or @ along it), which row slicing would split
// W4:    vectorize 4: the kernel reduces over the feature axis 'F' (a dot or @ along it), which row slicing would split

// -----

// A pairs sweep (a relation's transform per (vertex, relation) pair) whose row has a
// constant extent that the width does not divide: full slices, then one more full-width
// slice ending at the row's end (overlapping the one before), never a narrower tail; the
// pair's row is computed from zero in each slice and only written, so the overlap
// writes the same values again.

builtin.module {
  func.func @gnnc_pairs(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %x: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [\22N\22], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [], \22schedule_given\22: true, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %N = arith.constant 10 : index
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "pairs", vectorize = 4 : i64} : memref<?xi64> {
    ^bb0(%p: index, %worker: index):
      %p_row = arith.muli %p, %N : index
      loop.for_feature %N dim "N" {
      ^bb0(%n: index):
        %at = arith.addi %p_row, %n : index
        %value = memref.load %x[%at] : memref<?xf32>
        memref.store %value, %out[%at] : memref<?xf32>
        loop.yield
      }
      loop.yield
    }
    func.return
  }
}

// CHECK-LABEL: func.func @gnnc_pairs(
// CHECK:         %[[LAST:.*]] = arith.constant 6 : index
// CHECK:         scf.for %[[AT:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK:           loop.for_feature %{{.*}} dim "N" {
// CHECK:             arith.addi %{{.*}}, %[[AT]] : index
// CHECK:         }
// CHECK-NOT:     scf.if
// CHECK:         loop.for_feature %{{.*}} dim "N" {
// CHECK:           arith.addi %{{.*}}, %[[LAST]] : index
// CHECK-NOT:     scf.if

// W4-LABEL: func.func @gnnc_pairs(
// W4:         arith.constant 6 : index
// W4-NOT:     scf.if
