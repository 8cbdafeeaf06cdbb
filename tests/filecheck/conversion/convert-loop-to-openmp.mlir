// RUN: gnnc-opt %s --split-input-file --verify-diagnostics -p convert-loop-to-openmp | filecheck %s
// RUN: not gnnc-opt %s -p 'convert-loop-to-openmp{parallel=src}' 2>&1 | filecheck %s --check-prefix=ERR

// ERR: gnnc-opt: error: convert-loop-to-openmp{parallel="src"}: expected 'dst' after 'parallel', found 'src'

// out[v] = sum(w[e]): the sweep is outlined into @gnnc_wsum_phase0, which
// GOMP_parallel runs on num_threads threads (when there are blocks at all),
// taking the kernel's arguments from an i64 closure and handing them to
// @gnnc_wsum_phase0_work. There each worker takes blocks of destinations from
// libgomp's dynamic iterator: blocks b to e - 1, destinations dst_blocks[b] to
// dst_blocks[e] - 1; the worker id is omp_get_thread_num().

builtin.module {
  func.func @gnnc_wsum(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %w: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: false, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %zero = arith.constant 0.000000e+00 : f32
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst"} : memref<?xi64> {
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
// CHECK-NOT:     edge_ids
// CHECK:         [[ANY:%.*]] = arith.cmpi sgt, %num_blocks, {{%.*}} : index
// CHECK-NEXT:    scf.if [[ANY]] {
// CHECK-NEXT:      [[N:%.*]] = arith.constant 15 : index
// CHECK-NEXT:      [[CLOSURE:%.*]] = memref.alloca([[N]]) : memref<?xi64>
// CHECK:           llvm_ext.store_buffer %dst_blocks, [[CLOSURE]]
// CHECK:           llvm_ext.store_buffer %out, [[CLOSURE]]
// CHECK-NEXT:      [[FN:%.*]] = llvm.mlir.addressof @gnnc_wsum_phase0 : !llvm.ptr
// CHECK-NEXT:      [[T:%.*]] = arith.index_cast %num_threads : index to i32
// CHECK-NEXT:      [[FLAGS:%.*]] = arith.constant 0 : i32
// CHECK-NEXT:      func.call @GOMP_parallel([[FN]], [[CLOSURE]], [[T]], [[FLAGS]])
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return
// CHECK-NOT:     loop.for_dst

// CHECK-LABEL: func.func private @gnnc_wsum_phase0(
// CHECK-SAME:    [[ARGS:%.*]]: memref<?xi64>)
// CHECK:         llvm_ext.load_buffer [[ARGS]]
// CHECK:         func.call @gnnc_wsum_phase0_work(

// CHECK-LABEL: func.func private @gnnc_wsum_phase0_work(
// CHECK-SAME:    %num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64>
// CHECK:         [[TID:%.*]] = func.call @omp_get_thread_num() : () -> i32
// CHECK-NEXT:    %worker = arith.index_cast [[TID]] : i32 to index
// CHECK:         scf.for {{%.*}} = {{%.*}} to %num_blocks step {{%.*}} {
// CHECK:           func.call @GOMP_loop_dynamic_start(
// CHECK:           func.call @GOMP_loop_dynamic_next(
// CHECK:             scf.for [[B:%.*]] = {{%.*}} to {{%.*}} step {{%.*}} {
// CHECK-NEXT:          [[B1:%.*]] = arith.addi [[B]], {{%.*}} : index
// CHECK-NEXT:          [[LO:%.*]] = memref.load %dst_blocks{{\[}}[[B]]{{\]}} : memref<?xi64>
// CHECK-NEXT:          [[HI:%.*]] = memref.load %dst_blocks{{\[}}[[B1]]{{\]}} : memref<?xi64>
// CHECK-NEXT:          [[LOI:%.*]] = arith.index_cast [[LO]] : i64 to index
// CHECK-NEXT:          [[HII:%.*]] = arith.index_cast [[HI]] : i64 to index
// CHECK-NEXT:          scf.for %v = [[LOI]] to [[HII]] step {{%.*}} {
// CHECK-NEXT:            memref.store %zero, %out[%v] : memref<?xf32>
// CHECK-NEXT:            loop.for_in_edges %v in %in_indptr, %in_src, %in_eid
// CHECK:         func.call @GOMP_loop_end_nowait() : () -> ()

// CHECK: func.func private @GOMP_parallel(!llvm.ptr, memref<?xi64>, i32, i32) -> ()
// CHECK: func.func private @GOMP_loop_dynamic_start(i64, i64, i64, i64, memref<?xi64>, memref<?xi64>) -> i8
// CHECK: func.func private @omp_get_thread_num() -> i32

// -----

// out[v] = sum(x[u]) reads no edge id (its walk's %e is unused): before
// outlining, the record says so (`edge_ids` false), and the runtime may pass
// placeholders for in_eid; afterwards the closure carries every argument.

builtin.module {
  func.func @gnnc_plain(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %x: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: null}], \22schedule_given\22: false, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %zero = arith.constant 0.000000e+00 : f32
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst"} : memref<?xi64> {
    ^bb0(%v: index, %worker: index):
      memref.store %zero, %out[%v] : memref<?xf32>
      loop.for_in_edges %v in %in_indptr, %in_src, %in_eid : memref<?xi64>, memref<?xi64>, memref<?xi64> {
      ^bb0(%pos: index, %u: index, %e: index):
        %acc = memref.load %out[%v] : memref<?xf32>
        %xu = memref.load %x[%u] : memref<?xf32>
        %sum = arith.addf %acc, %xu : f32
        memref.store %sum, %out[%v] : memref<?xf32>
        loop.yield
      }
      loop.yield
    }
    func.return
  }
}

// CHECK-LABEL: func.func @gnnc_plain(
// CHECK-SAME:    edge_ids\22: false
// CHECK:         func.call @GOMP_parallel(

// -----

// A sweep still carrying a schedule entry no pass implemented is refused:
// a schedule is never dropped silently.

builtin.module {
  func.func @gnnc_wsum(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %w: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [], \22edge_order\22: null, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: true, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", order = "degree", tile = 4 : i64} : memref<?xi64> {
    ^bb0(%v: index, %worker: index):
      loop.yield
    }
    func.return
  }
}

// CHECK: 'loop.for_dst' still carries schedule order, tile: no pass implemented it
