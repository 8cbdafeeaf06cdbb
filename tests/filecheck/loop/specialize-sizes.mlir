// RUN: gnnc-opt %s --split-input-file --verify-diagnostics -p specialize-sizes | filecheck %s
// RUN: gnnc-opt %s --split-input-file --verify-diagnostics -p 'specialize-sizes{sizes="F 16"}' | filecheck %s --check-prefix=F16

// gcn scheduled `specialize F 32`: the load of F from dims becomes the
// constant 32, the entry is consumed, and the ABI record says the kernel is
// compiled for F = 32 (the runtime refuses other sizes).

builtin.module {
  func.func @gnnc_gcn(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %x: memref<?xf32> {llvm.noalias, llvm.readonly}, %w: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [\22F\22], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: true, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c0 = arith.constant 0 : index
    %F_i64 = memref.load %dims[%c0] : memref<?xi64>
    %F = arith.index_cast %F_i64 : i64 to index
    %c1 = arith.constant 1 : index
    %row = arith.muli %c1, %F : index
    %zero = arith.constant 0.000000e+00 : f32
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", specialize = "F 32"} : memref<?xi64> {
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
// CHECK-SAME:    \22sizes\22: {\22F\22: 32}
// CHECK:         %c0 = arith.constant 0 : index
// CHECK-NEXT:    %F_i64 = arith.constant 32 : i64
// CHECK-NEXT:    %F = arith.index_cast %F_i64 : i64 to index
// CHECK-NOT:     memref.load %dims
// CHECK:         loop.for_dst {{.*}} schedule {parallel = "dst"}

// F16-LABEL: func.func @gnnc_gcn(
// F16-SAME:    \22sizes\22: {\22F\22: 16}
// F16:         %F_i64 = arith.constant 16 : i64
// F16-NOT:     specialize =

// -----

// No `specialize` entry: F stays a run-time size.

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
// CHECK-NOT:     \22sizes\22: {
// CHECK:         %F_i64 = memref.load %dims[%c0] : memref<?xi64>

// F16-LABEL: func.func @gnnc_gcn(
// F16:         %F_i64 = arith.constant 16 : i64

// -----

// A size for a dimension the kernel does not have is refused; the option
// replaces the schedule's entry.

builtin.module {
  func.func @gnnc_gcn(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %x: memref<?xf32> {llvm.noalias, llvm.readonly}, %w: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [\22F\22], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: true, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c0 = arith.constant 0 : index
    %F_i64 = memref.load %dims[%c0] : memref<?xi64>
    %F = arith.index_cast %F_i64 : i64 to index
    %c1 = arith.constant 1 : index
    %row = arith.muli %c1, %F : index
    %zero = arith.constant 0.000000e+00 : f32
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", specialize = "H 4"} : memref<?xi64> {
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

// CHECK: specialize: kernel @gnnc_gcn has no dimension H (its dimensions: F)

// F16-LABEL: func.func @gnnc_gcn(
// F16:         %F_i64 = arith.constant 16 : i64
