// RUN: gnnc-opt %s --split-input-file --verify-diagnostics -p emulate-grid | filecheck %s

// A grid as map-threads builds them (trimmed): each block stages rows in its
// shared memory, a barrier, then each thread's warp sums a row over its lanes.
// The grid becomes a loop over blocks and, per stretch between barriers, a
// loop over the block's 256 threads; shared memory one stack buffer; the
// warp_sum every lane's partial sum in memory (lane l folds terms l, l + 32,
// ...) and five butterfly rounds adding partials l and l ^ 16, ..., l ^ 1.

builtin.module {
  func.func @grid(%n: index, %num_blocks: index, %x: memref<?xf32>, %out: memref<?xf32>) {
    %c32 = arith.constant 32 : index
    %c256 = arith.constant 256 : index
    %tile = llvm_ext.shared_memory %c256 : memref<?xf32>
    loop.grid blocks %num_blocks threads 256 mapping warp_vertex {
    ^bb0(%block: index, %thread: index):
      %staged = memref.load %x[%thread] : memref<?xf32>
      memref.store %staged, %tile[%thread] : memref<?xf32>
      llvm_ext.barrier
      %base = arith.muli %block, %c256 : index
      %g = arith.addi %base, %thread : index
      %lane = arith.remui %g, %c32 : index
      %s = loop.warp_sum %n lane %lane of 32 : f32 {
      ^bb0(%i: index, %acc: f32):
        %t = memref.load %tile[%i] : memref<?xf32>
        %next = arith.addf %acc, %t : f32
        loop.yield %next : f32
      }
      memref.store %s, %out[%g] : memref<?xf32>
      loop.yield
    }
    func.return
  }
}

// CHECK-LABEL: func.func @grid(
// CHECK:         %tile = memref.alloca(%c256) : memref<?xf32>
// CHECK-NEXT:    [[ZERO:%.*]] = arith.constant 0 : index
// CHECK-NEXT:    [[ONE:%.*]] = arith.constant 1 : index
// CHECK-NEXT:    [[SIZE:%.*]] = arith.constant 256 : index
// CHECK-NEXT:    scf.for %block = [[ZERO]] to %num_blocks step [[ONE]] {
// CHECK-NEXT:      scf.for [[T0:%.*]] = [[ZERO]] to [[SIZE]] step [[ONE]] {
// CHECK-NEXT:        %staged = memref.load %x{{\[}}[[T0]]{{\]}} : memref<?xf32>
// CHECK-NEXT:        memref.store %staged, %tile{{\[}}[[T0]]{{\]}} : memref<?xf32>
// CHECK-NEXT:      }
// CHECK-NEXT:      scf.for [[T1:%.*]] = [[ZERO]] to [[SIZE]] step [[ONE]] {
// CHECK-NEXT:        %base = arith.muli %block, %c256 : index
// CHECK-NEXT:        %g = arith.addi %base, [[T1]] : index
// CHECK-NEXT:        %lane = arith.remui %g, %c32 : index
// CHECK-NEXT:        [[L0:%.*]] = arith.constant 0 : index
// CHECK-NEXT:        [[L1:%.*]] = arith.constant 1 : index
// CHECK-NEXT:        [[LANES:%.*]] = arith.constant 32 : index
// CHECK-NEXT:        [[FZERO:%.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT:        [[PARTIALS:%.*]] = memref.alloca() : memref<32xf32>
// CHECK-NEXT:        scf.for [[L:%.*]] = [[L0]] to [[LANES]] step [[L1]] {
// CHECK-NEXT:          [[PART:%.*]] = scf.for %i = [[L]] to %n step [[LANES]] iter_args(%acc = [[FZERO]]) -> (f32) {
// CHECK-NEXT:            %t = memref.load %tile[%i] : memref<?xf32>
// CHECK-NEXT:            %next = arith.addf %acc, %t : f32
// CHECK-NEXT:            scf.yield %next : f32
// CHECK-NEXT:          }
// CHECK-NEXT:          memref.store [[PART]], [[PARTIALS]]{{\[}}[[L]]{{\]}} : memref<32xf32>
// CHECK-NEXT:        }
// CHECK-NEXT:        scf.for [[P:%.*]] = [[L0]] to [[LANES]] step [[L1]] {
// CHECK-NEXT:          [[OFF:%.*]] = arith.constant 16 : index
// CHECK-NEXT:          [[PARTNER:%.*]] = arith.xori [[P]], [[OFF]] : index
// CHECK-NEXT:          [[FIRST:%.*]] = arith.cmpi ult, [[P]], [[PARTNER]] : index
// CHECK-NEXT:          scf.if [[FIRST]] {
// CHECK-NEXT:            [[A:%.*]] = memref.load [[PARTIALS]]{{\[}}[[P]]{{\]}}
// CHECK-NEXT:            [[B:%.*]] = memref.load [[PARTIALS]]{{\[}}[[PARTNER]]{{\]}}
// CHECK-NEXT:            [[AB:%.*]] = arith.addf [[A]], [[B]] : f32
// CHECK-NEXT:            memref.store [[AB]], [[PARTIALS]]{{\[}}[[P]]{{\]}}
// CHECK-NEXT:            memref.store [[AB]], [[PARTIALS]]{{\[}}[[PARTNER]]{{\]}}
// CHECK:               arith.constant 8 : index
// CHECK:               arith.constant 4 : index
// CHECK:               arith.constant 2 : index
// CHECK:               arith.constant 1 : index
// CHECK:             [[S:%.*]] = memref.load [[PARTIALS]][%lane] : memref<32xf32>
// CHECK-NEXT:        memref.store [[S]], %out[%g] : memref<?xf32>
// CHECK-NOT:     loop.
// CHECK-NOT:     llvm_ext.

// -----

// A value computed before a barrier and used after it would need a copy per
// thread: the grid's builder never makes one, and the emulation refuses it.

builtin.module {
  func.func @crossing(%num_blocks: index, %out: memref<?xf32>) {
    loop.grid blocks %num_blocks threads 32 mapping thread_vertex {
    ^bb0(%block: index, %thread: index):
      %before = arith.addi %block, %thread : index
      llvm_ext.barrier
      %zero = arith.constant 0.000000e+00 : f32
      memref.store %zero, %out[%before] : memref<?xf32>
      loop.yield
    }
    func.return
  }
}

// CHECK: internal error: a value crosses a block barrier of a grid
