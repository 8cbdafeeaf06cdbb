// RUN: gnnc-opt %s --split-input-file --verify-diagnostics -p convert-loop-to-scf | filecheck %s

// What convert-loop-to-openmp leaves of a sweep in a destination order: per
// position, loop.dst_at gives the destination, then its in-edge walk gathers
// a row per edge; beside it, a 4 x 64 head nest of constant extents.
// dst_at becomes a load of the order; the walk runs from in_indptr[v] to
// in_indptr[v + 1], loading each edge's source and id, and is marked not to
// be vectorised across edges (it has a row loop inside); feature loops run
// from 0 to their extent. The nest covers 256 > 128 elements, so LLVM is
// told not to unroll it, nor its 64-element rows, which interleave 4 vectors.

builtin.module {
  func.func @work(%lo: index, %hi: index, %F: index, %dst_order: memref<?xi64>, %in_indptr: memref<?xi64>, %in_src: memref<?xi64>, %in_eid: memref<?xi64>, %x: memref<?xf32>, %out: memref<?xf32>) {
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %c64 = arith.constant 64 : index
    scf.for %pos = %lo to %hi step %c1 {
      %v = loop.dst_at %dst_order[%pos] : memref<?xi64>
      loop.for_in_edges %v in %in_indptr, %in_src, %in_eid : memref<?xi64>, memref<?xi64>, memref<?xi64> {
      ^bb0(%p: index, %u: index, %e: index):
        loop.for_feature %F dim "F" {
        ^bb0(%f: index):
          %xu = memref.load %x[%u] : memref<?xf32>
          memref.store %xu, %out[%e] : memref<?xf32>
          loop.yield
        }
        loop.yield
      }
      loop.for_feature %c4 dim "H" {
      ^bb0(%h: index):
        loop.for_feature %c64 dim "F" {
        ^bb0(%f: index):
          %xv = memref.load %x[%v] : memref<?xf32>
          memref.store %xv, %out[%v] : memref<?xf32>
          loop.yield
        }
        loop.yield
      }
    }
    func.return
  }
}

// CHECK-LABEL: func.func @work(
// CHECK:         scf.for %pos = %lo to %hi step %c1 {
// CHECK-NEXT:      [[VI:%.*]] = memref.load %dst_order[%pos] : memref<?xi64>
// CHECK-NEXT:      [[V:%.*]] = arith.index_cast [[VI]] : i64 to index
// CHECK-NEXT:      [[ONE:%.*]] = arith.constant 1 : index
// CHECK-NEXT:      [[V1:%.*]] = arith.addi [[V]], [[ONE]] : index
// CHECK-NEXT:      [[LO:%.*]] = memref.load %in_indptr{{\[}}[[V]]{{\]}} : memref<?xi64>
// CHECK-NEXT:      [[HI:%.*]] = memref.load %in_indptr{{\[}}[[V1]]{{\]}} : memref<?xi64>
// CHECK-NEXT:      [[LOI:%.*]] = arith.index_cast [[LO]] : i64 to index
// CHECK-NEXT:      [[HII:%.*]] = arith.index_cast [[HI]] : i64 to index
// CHECK-NEXT:      [[STEP:%.*]] = arith.constant 1 : index
// CHECK-NEXT:      scf.for %p = [[LOI]] to [[HII]] step [[STEP]] {
// CHECK-NEXT:        [[UI:%.*]] = memref.load %in_src[%p] : memref<?xi64>
// CHECK-NEXT:        [[EI:%.*]] = memref.load %in_eid[%p] : memref<?xi64>
// CHECK-NEXT:        [[U:%.*]] = arith.index_cast [[UI]] : i64 to index
// CHECK-NEXT:        [[E:%.*]] = arith.index_cast [[EI]] : i64 to index
// CHECK-NEXT:        [[ZERO:%.*]] = arith.constant 0 : index
// CHECK-NEXT:        [[FSTEP:%.*]] = arith.constant 1 : index
// CHECK-NEXT:        scf.for %f = [[ZERO]] to %F step [[FSTEP]] {
// CHECK-NEXT:          %xu = memref.load %x{{\[}}[[U]]{{\]}} : memref<?xf32>
// CHECK-NEXT:          memref.store %xu, %out{{\[}}[[E]]{{\]}} : memref<?xf32>
// CHECK-NEXT:        }
// CHECK-NEXT:      } {gnnc.no_vectorize}
// CHECK:           scf.for %h = {{%.*}} to %c4 step {{%.*}} {
// CHECK:             scf.for {{%.*}} = {{%.*}} to %c64 step {{%.*}} {
// CHECK:             } {gnnc.no_unroll, gnnc.interleave_count = 4 : i64}
// CHECK-NEXT:      } {gnnc.no_vectorize, gnnc.no_unroll}
// CHECK-NOT:     loop.

// -----

// Without the outliner (gnnc-opt -p convert-graph-to-loop,convert-loop-to-scf),
// a sweep in its tile and partition loops runs as sequential loops: tiles of
// width min(8, F - start), partitions 0 and 1, destinations 0 to V - 1 on worker 0.

builtin.module {
  func.func @sweep(%F: index, %num_vertices: index, %dst_blocks: memref<?xi64>, %num_blocks: index, %num_threads: index, %out: memref<?xf32>) {
    loop.for_tile %F by 8 dim "F" {
    ^bb0(%start: index, %width: index):
      loop.for_partition 2 {
      ^bb0(%part: index):
        loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", order = "identity"} : memref<?xi64> {
        ^bb0(%v: index, %worker: index):
          %i = arith.addi %v, %start : index
          %j = arith.addi %i, %part : index
          %k = arith.addi %j, %worker : index
          %l = arith.addi %k, %width : index
          %zero = arith.constant 0.000000e+00 : f32
          memref.store %zero, %out[%l] : memref<?xf32>
          loop.yield
        }
        loop.yield
      }
      loop.yield
    }
    func.return
  }
}

// CHECK-LABEL: func.func @sweep(
// CHECK-NEXT:    [[C0:%.*]] = arith.constant 0 : index
// CHECK-NEXT:    [[C8:%.*]] = arith.constant 8 : index
// CHECK-NEXT:    scf.for %start = [[C0]] to %F step [[C8]] {
// CHECK-NEXT:      [[LEFT:%.*]] = arith.subi %F, %start : index
// CHECK-NEXT:      %width = arith.minsi [[LEFT]], [[C8]] : index
// CHECK-NEXT:      [[P0:%.*]] = arith.constant 0 : index
// CHECK-NEXT:      [[P2:%.*]] = arith.constant 2 : index
// CHECK-NEXT:      [[P1:%.*]] = arith.constant 1 : index
// CHECK-NEXT:      scf.for %part = [[P0]] to [[P2]] step [[P1]] {
// CHECK-NEXT:        [[W0:%.*]] = arith.constant 0 : index
// CHECK-NEXT:        [[ONE:%.*]] = arith.constant 1 : index
// CHECK-NEXT:        scf.for %v = [[W0]] to %num_vertices step [[ONE]] {
// CHECK-NEXT:          %i = arith.addi %v, %start : index
// CHECK-NEXT:          %j = arith.addi %i, %part : index
// CHECK-NEXT:          %k = arith.addi %j, [[W0]] : index
// CHECK-NOT:     loop.

// -----

// A destination order no pass implemented: refused, not dropped.

builtin.module {
  func.func @unordered(%num_vertices: index, %dst_blocks: memref<?xi64>, %num_blocks: index, %num_threads: index) {
    loop.for_dst %num_vertices blocks %dst_blocks[%num_blocks] threads %num_threads schedule {parallel = "dst", order = "degree"} : memref<?xi64> {
    ^bb0(%v: index, %worker: index):
      loop.yield
    }
    func.return
  }
}

// CHECK:      // {{-----}}
// CHECK-NEXT: 'loop.for_dst' still carries schedule order: no pass implemented it
