// RUN: gnnc-opt %s --split-input-file -p specialize-unit-dims | filecheck %s

// out[v] = sum(a[e] * h[u]), h: f32[V, H, F], a: f32[E, H]: the head axis H
// encloses the F loops. Each destination's body is versioned on H == 1: the
// copy runs its H loops to the constant 1 and recomputes the sizes H enters
// (the row of h and out, the row of a) with 1; the original, for other H,
// stays in the else branch. The if is marked with the axis.

builtin.module {
  func.func @gnnc_heads(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %h: memref<?xf32> {llvm.noalias, llvm.readonly}, %a: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [\22H\22, \22F\22], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: true, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c0 = arith.constant 0 : index
    %H_i64 = memref.load %dims[%c0] : memref<?xi64>
    %H = arith.index_cast %H_i64 : i64 to index
    %c1 = arith.constant 1 : index
    %F_i64 = memref.load %dims[%c1] : memref<?xi64>
    %F = arith.index_cast %F_i64 : i64 to index
    %h_row_H = arith.muli %c1, %H : index
    %row = arith.muli %h_row_H, %F : index
    %zero = arith.constant 0.000000e+00 : f32
    %a_row = arith.muli %c1, %H : index
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", order = "identity"} : memref<?xi64> {
    ^bb0(%v: index, %worker: index):
      %v_row = arith.muli %v, %row : index
      loop.for_feature %H dim "H" {
      ^bb0(%hh: index):
        loop.for_feature %F dim "F" {
        ^bb0(%f: index):
          %hF = arith.muli %hh, %F : index
          %hf = arith.addi %hF, %f : index
          %at = arith.addi %v_row, %hf : index
          memref.store %zero, %out[%at] : memref<?xf32>
          loop.yield
        }
        loop.yield
      }
      loop.for_in_edges %v in %in_indptr, %in_src, %in_eid : memref<?xi64>, memref<?xi64>, memref<?xi64> {
      ^bb0(%pos: index, %u: index, %e: index):
        loop.for_feature %H dim "H" {
        ^bb0(%hh_1: index):
          %e_row = arith.muli %e, %a_row : index
          %a_i = arith.addi %e_row, %hh_1 : index
          %a_eh = memref.load %a[%a_i] : memref<?xf32>
          loop.for_feature %F dim "F" {
          ^bb0(%f_1: index):
            %hF_1 = arith.muli %hh_1, %F : index
            %hf_1 = arith.addi %hF_1, %f_1 : index
            %o = arith.addi %v_row, %hf_1 : index
            %acc = memref.load %out[%o] : memref<?xf32>
            %u_row = arith.muli %u, %row : index
            %hF_2 = arith.muli %hh_1, %F : index
            %hf_2 = arith.addi %hF_2, %f_1 : index
            %i = arith.addi %u_row, %hf_2 : index
            %hu = memref.load %h[%i] : memref<?xf32>
            %prod = arith.mulf %a_eh, %hu : f32
            %sum = arith.addf %acc, %prod : f32
            memref.store %sum, %out[%o] : memref<?xf32>
            loop.yield
          }
          loop.yield
        }
        loop.yield
      }
      loop.yield
    }
    func.return
  }
}

// CHECK-LABEL: func.func @gnnc_heads(
// CHECK:         loop.for_dst
// CHECK-NEXT:    ^bb0(%v: index, %worker: index):
// CHECK-NEXT:      [[ONE:%.*]] = arith.constant 1 : index
// CHECK-NEXT:      [[UNIT:%.*]] = arith.cmpi eq, %H, [[ONE]] : index
// CHECK-NEXT:      scf.if [[UNIT]] {
// CHECK-NEXT:        [[HROW:%.*]] = arith.muli %c1, [[ONE]] : index
// CHECK-NEXT:        [[ROW1:%.*]] = arith.muli [[HROW]], %F : index
// CHECK-NEXT:        [[AROW1:%.*]] = arith.muli %c1, [[ONE]] : index
// CHECK-NEXT:        [[VROW1:%.*]] = arith.muli %v, [[ROW1]] : index
// CHECK-NEXT:        loop.for_feature [[ONE]] dim "H" {
// CHECK:             memref.store %zero, %out
// CHECK:           loop.for_in_edges %v in %in_indptr, %in_src, %in_eid
// CHECK-NEXT:      ^bb0(%pos: index, %u: index, %e: index):
// CHECK-NEXT:        loop.for_feature [[ONE]] dim "H" {
// CHECK-NEXT:        ^bb0([[HH:%.*]]: index):
// CHECK-NEXT:          [[EROW:%.*]] = arith.muli %e, [[AROW1]] : index
// CHECK:               {{%.*}} = arith.muli %u, [[ROW1]] : index
// CHECK:           } else {
// CHECK-NEXT:        {{%.*}} = arith.muli %v, %row : index
// CHECK-NEXT:        loop.for_feature %H dim "H" {
// CHECK:             loop.for_feature %H dim "H" {
// CHECK:           }{gnnc.unit_dim = "H"}
// CHECK-NEXT:      loop.yield

// -----

// A sweep tile-features will restructure is left alone: that pass expects the
// body's loops directly in it.

builtin.module {
  func.func @gnnc_heads_tiled(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %h: memref<?xf32> {llvm.noalias, llvm.readonly}, %a: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [\22H\22, \22F\22], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: true, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c0 = arith.constant 0 : index
    %H_i64 = memref.load %dims[%c0] : memref<?xi64>
    %H = arith.index_cast %H_i64 : i64 to index
    %c1 = arith.constant 1 : index
    %F_i64 = memref.load %dims[%c1] : memref<?xi64>
    %F = arith.index_cast %F_i64 : i64 to index
    %h_row_H = arith.muli %c1, %H : index
    %row = arith.muli %h_row_H, %F : index
    %zero = arith.constant 0.000000e+00 : f32
    %a_row = arith.muli %c1, %H : index
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", order = "identity", tile = 4 : i64} : memref<?xi64> {
    ^bb0(%v: index, %worker: index):
      %v_row = arith.muli %v, %row : index
      loop.for_feature %H dim "H" {
      ^bb0(%hh: index):
        loop.for_feature %F dim "F" {
        ^bb0(%f: index):
          %hF = arith.muli %hh, %F : index
          %hf = arith.addi %hF, %f : index
          %at = arith.addi %v_row, %hf : index
          memref.store %zero, %out[%at] : memref<?xf32>
          loop.yield
        }
        loop.yield
      }
      loop.for_in_edges %v in %in_indptr, %in_src, %in_eid : memref<?xi64>, memref<?xi64>, memref<?xi64> {
      ^bb0(%pos: index, %u: index, %e: index):
        loop.for_feature %H dim "H" {
        ^bb0(%hh_1: index):
          %e_row = arith.muli %e, %a_row : index
          %a_i = arith.addi %e_row, %hh_1 : index
          %a_eh = memref.load %a[%a_i] : memref<?xf32>
          loop.for_feature %F dim "F" {
          ^bb0(%f_1: index):
            %hF_1 = arith.muli %hh_1, %F : index
            %hf_1 = arith.addi %hF_1, %f_1 : index
            %o = arith.addi %v_row, %hf_1 : index
            %acc = memref.load %out[%o] : memref<?xf32>
            %u_row = arith.muli %u, %row : index
            %hF_2 = arith.muli %hh_1, %F : index
            %hf_2 = arith.addi %hF_2, %f_1 : index
            %i = arith.addi %u_row, %hf_2 : index
            %hu = memref.load %h[%i] : memref<?xf32>
            %prod = arith.mulf %a_eh, %hu : f32
            %sum = arith.addf %acc, %prod : f32
            memref.store %sum, %out[%o] : memref<?xf32>
            loop.yield
          }
          loop.yield
        }
        loop.yield
      }
      loop.yield
    }
    func.return
  }
}

// CHECK-LABEL: func.func @gnnc_heads_tiled(
// CHECK-NOT:     scf.if
// CHECK-NOT:     gnnc.unit_dim
// CHECK:         func.return
