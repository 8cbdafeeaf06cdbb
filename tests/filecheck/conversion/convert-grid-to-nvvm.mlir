// RUN: gnnc-opt %s --split-input-file -p convert-grid-to-nvvm | filecheck %s

// out[v] = sum(w[e]) mapped thread_edge (trimmed): a vertex grid zeroes the
// rows, an edge grid adds each edge's weight atomically. One launch has no
// grid-wide barrier, so each grid becomes a kernel of its own: @gnnc_wsum
// keeps grid 0, @gnnc_wsum_phase1 grid 1, both with every argument; the block
// and thread ids are %ctaid.x and %tid.x; the record (on the first) lists the
// phases in launch order. Each grid is a grid-stride loop (blocks %ctaid.x,
// %ctaid.x + %nctaid.x, ...): the runtime launches at most CUDA_MAX_BLOCKS.

builtin.module {
  func.func @gnnc_wsum(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %w: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [], \22edge_order\22: null, \22grid\22: {\22block_size\22: 256, \22dst_scratch\22: false, \22grids\22: [{\22group\22: 1, \22over\22: \22V\22}, {\22group\22: 1, \22over\22: \22E\22}], \22group\22: 1, \22hybrid\22: null, \22lanes\22: 1, \22mapping\22: \22thread_edge\22, \22schedule_given\22: true}, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: false, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c256 = arith.constant 256 : index
    %zero = arith.constant 0.000000e+00 : f32
    %vertex_blocks = arith.divui %num_vertices, %c256 : index
    loop.grid blocks %vertex_blocks threads 256 mapping thread_vertex {
    ^bb0(%block: index, %thread: index):
      %base = arith.muli %block, %c256 : index
      %v = arith.addi %base, %thread : index
      memref.store %zero, %out[%v] : memref<?xf32>
      loop.yield
    }
    %edge_blocks = arith.divui %num_edges, %c256 : index
    loop.grid blocks %edge_blocks threads 256 mapping thread_edge {
    ^bb0(%block: index, %thread: index):
      %base = arith.muli %block, %c256 : index
      %pos = arith.addi %base, %thread : index
      %we = memref.load %w[%pos] : memref<?xf32>
      llvm_ext.atomic_rmw "fadd" %out[%pos], %we : memref<?xf32>, f32
      loop.yield
    }
    func.return
  }
}

// CHECK-LABEL: func.func @gnnc_wsum(
// CHECK-SAME:    \22mapping\22: \22thread_edge\22, \22phases\22: [\22gnnc_wsum\22, \22gnnc_wsum_phase1\22]
// CHECK-SAME:    gnnc.ptx_kernel
// CHECK:         %vertex_blocks = arith.divui
// CHECK-NEXT:    [[B:%.*]] = llvm_ext.nvvm_sreg "ctaid.x"
// CHECK-NEXT:    [[T:%.*]] = llvm_ext.nvvm_sreg "tid.x"
// CHECK-NEXT:    [[N:%.*]] = llvm_ext.nvvm_sreg "nctaid.x"
// CHECK-NEXT:    scf.for %block = [[B]] to %vertex_blocks step [[N]] {
// CHECK-NEXT:      %base = arith.muli %block, %c256 : index
// CHECK-NEXT:      %v = arith.addi %base, [[T]] : index
// CHECK-NEXT:      memref.store %zero, %out[%v]
// CHECK-NEXT:    }
// CHECK-NEXT:    %edge_blocks = arith.divui
// CHECK-NEXT:    func.return
// CHECK-LABEL: func.func @gnnc_wsum_phase1(
// CHECK-NOT:     gnnc.ir.abi
// CHECK-SAME:    gnnc.ptx_kernel
// CHECK:         %edge_blocks = arith.divui
// CHECK-NEXT:    [[B:%.*]] = llvm_ext.nvvm_sreg "ctaid.x"
// CHECK-NEXT:    [[T:%.*]] = llvm_ext.nvvm_sreg "tid.x"
// CHECK-NEXT:    [[N:%.*]] = llvm_ext.nvvm_sreg "nctaid.x"
// CHECK-NEXT:    scf.for %block = [[B]] to %edge_blocks step [[N]] {
// CHECK-NEXT:      %base = arith.muli %block, %c256 : index
// CHECK-NEXT:      %pos = arith.addi %base, [[T]] : index
// CHECK-NEXT:      %we = memref.load %w[%pos]
// CHECK-NEXT:      llvm_ext.atomic_rmw "fadd" %out[%pos], %we
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return
// CHECK-NOT:     loop.

// -----

// A warp_sum over groups of 8 lanes (Seastar's feature-adaptive groups) is
// each lane's strided partial sum, then three butterfly shuffles (offsets
// 4, 2, 1) under the mask of the lane's group: 0xff shifted to its first lane.

builtin.module {
  func.func @gnnc_dots(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %q: memref<?xf32> {llvm.noalias, llvm.readonly}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [\22D\22], \22edge_order\22: null, \22grid\22: {\22block_size\22: 256, \22dst_scratch\22: false, \22grids\22: [{\22group\22: 1, \22over\22: \22V\22}], \22group\22: 1, \22hybrid\22: null, \22lanes\22: 8, \22mapping\22: \22warp_vertex\22, \22schedule_given\22: true}, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: false, \22scratch\22: [], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c8 = arith.constant 8 : index
    %D_i64 = memref.load %dims[%c8] : memref<?xi64>
    %D = arith.index_cast %D_i64 : i64 to index
    loop.grid blocks %num_blocks threads 256 mapping warp_vertex {
    ^bb0(%block: index, %thread: index):
      %lane = arith.remui %thread, %c8 : index
      %s = loop.warp_sum %D lane %lane of 8 : f32 {
      ^bb0(%i: index, %acc: f32):
        %qi = memref.load %q[%i] : memref<?xf32>
        %next = arith.addf %acc, %qi : f32
        loop.yield %next : f32
      }
      memref.store %s, %out[%block] : memref<?xf32>
      loop.yield
    }
    func.return
  }
}

// CHECK-LABEL: func.func @gnnc_dots(
// CHECK-SAME:    \22phases\22: [\22gnnc_dots\22]
// CHECK-SAME:    gnnc.ptx_kernel
// CHECK:         [[B:%.*]] = llvm_ext.nvvm_sreg "ctaid.x"
// CHECK-NEXT:    [[T:%.*]] = llvm_ext.nvvm_sreg "tid.x"
// CHECK-NEXT:    [[N:%.*]] = llvm_ext.nvvm_sreg "nctaid.x"
// CHECK-NEXT:    scf.for %block = [[B]] to %num_blocks step [[N]] {
// CHECK-NEXT:    %lane = arith.remui [[T]], %c8 : index
// CHECK-NEXT:    [[FZERO:%.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT:    [[LANES:%.*]] = arith.constant 8 : index
// CHECK-NEXT:    [[PART:%.*]] = scf.for %i = %lane to %D step [[LANES]] iter_args(%acc = [[FZERO]]) -> (f32) {
// CHECK:         }
// CHECK-NEXT:    [[LANEID:%.*]] = llvm_ext.nvvm_sreg "laneid"
// CHECK-NEXT:    [[FIRST:%.*]] = arith.subi [[LANEID]], %lane : index
// CHECK-NEXT:    [[FIRST64:%.*]] = arith.index_cast [[FIRST]] : index to i64
// CHECK-NEXT:    [[ONES:%.*]] = arith.constant 255 : i64
// CHECK-NEXT:    [[SHIFTED:%.*]] = arith.shli [[ONES]], [[FIRST64]] : i64
// CHECK-NEXT:    [[MASK:%.*]] = arith.trunci [[SHIFTED]] : i64 to i32
// CHECK-NEXT:    [[O4:%.*]] = llvm_ext.shfl_bfly [[PART]], 4 : i32 mask [[MASK]] : f32
// CHECK-NEXT:    [[S4:%.*]] = arith.addf [[PART]], [[O4]] : f32
// CHECK-NEXT:    [[O2:%.*]] = llvm_ext.shfl_bfly [[S4]], 2 : i32 mask [[MASK]] : f32
// CHECK-NEXT:    [[S2:%.*]] = arith.addf [[S4]], [[O2]] : f32
// CHECK-NEXT:    [[O1:%.*]] = llvm_ext.shfl_bfly [[S2]], 1 : i32 mask [[MASK]] : f32
// CHECK-NEXT:    [[S1:%.*]] = arith.addf [[S2]], [[O1]] : f32
// CHECK-NEXT:    memref.store [[S1]], %out[%block] : memref<?xf32>
// CHECK-NEXT:    }
// CHECK-NOT:     loop.

// -----

// A thread's scratch slice goes by its index in the launch (%ctaid.x * 256 +
// %tid.x), not by its grid thread (%block * 256 + %tid.x), which indexes the
// work: the runtime allocates one slice per launched thread.

builtin.module {
  func.func @gnnc_slots(%num_vertices: index, %num_edges: index, %num_threads: index, %num_blocks: index, %dst_blocks: memref<?xi64> {llvm.noalias, llvm.readonly}, %dst_order: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_indptr: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_src: memref<?xi64> {llvm.noalias, llvm.readonly}, %in_eid: memref<?xi64> {llvm.noalias, llvm.readonly}, %deg_in: memref<?xf32> {llvm.noalias, llvm.readonly}, %deg_out: memref<?xf32> {llvm.noalias, llvm.readonly}, %dims: memref<?xi64> {llvm.noalias, llvm.readonly}, %scratch: memref<?xf32> {llvm.noalias}, %out: memref<?xf32> {llvm.noalias}) attributes {gnnc.ir.abi = "{\22acc_rows\22: [], \22dims\22: [], \22edge_order\22: null, \22grid\22: {\22block_size\22: 256, \22dst_scratch\22: false, \22grids\22: [{\22group\22: 1, \22over\22: \22V\22}], \22group\22: 1, \22hybrid\22: null, \22lanes\22: 1, \22mapping\22: \22thread_vertex\22, \22schedule_given\22: true}, \22groups\22: null, \22order\22: \22identity\22, \22partitions\22: null, \22phases\22: [{\22edge_walks\22: 1, \22row_dim\22: \22F\22}], \22schedule_given\22: false, \22scratch\22: [[2]], \22source_sweep\22: false, \22stream\22: false, \22temps\22: []}"} {
    %c16 = arith.constant 16 : index
    %zero = arith.constant 0.000000e+00 : f32
    loop.grid blocks %num_blocks threads 256 mapping thread_vertex {
    ^bb0(%block: index, %thread: index):
      %c256 = arith.constant 256 : index
      %base = arith.muli %block, %c256 : index
      %gid = arith.addi %base, %thread : index
      %slot = arith.muli %gid, %c16 : index
      %at = arith.addi %slot, %c16 {gnnc.scratch_base} : index
      memref.store %zero, %scratch[%at] : memref<?xf32>
      %acc = memref.load %scratch[%at] : memref<?xf32>
      memref.store %acc, %out[%gid] : memref<?xf32>
      loop.yield
    }
    func.return
  }
}

// CHECK-LABEL: func.func @gnnc_slots(
// CHECK:         [[B:%.*]] = llvm_ext.nvvm_sreg "ctaid.x"
// CHECK-NEXT:    [[T:%.*]] = llvm_ext.nvvm_sreg "tid.x"
// CHECK-NEXT:    [[N:%.*]] = llvm_ext.nvvm_sreg "nctaid.x"
// CHECK-NEXT:    [[SIZE:%.*]] = arith.constant 256 : index
// CHECK-NEXT:    [[FIRST:%.*]] = arith.muli [[B]], [[SIZE]] : index
// CHECK-NEXT:    [[PHYSICAL:%.*]] = arith.addi [[FIRST]], [[T]] : index
// CHECK-NEXT:    scf.for %block = [[B]] to %num_blocks step [[N]] {
// CHECK:           %gid = arith.addi %base, [[T]] : index
// CHECK-NEXT:      %slot = arith.muli [[PHYSICAL]], %c16 : index
// CHECK-NEXT:      %at = arith.addi %slot, %c16 {gnnc.scratch_base} : index
// CHECK:           memref.store %acc, %out[%gid]
