// RUN: gnnc-opt %s --split-input-file -p annotate-fusion | filecheck %s

// gat after deferred-division: one loop nest (fusion_group 0). Per destination,
// in-edge walk 1 finds the maximum score, walk 2 sums the exponentials and the
// weighted rows, walk 3 scales the stored weights (alpha); level 0 is the
// per-destination code outside the walks (the gather at v, 1 / z, the scaling).

builtin.module {
  func.func @gat(%h: !graph.tensor<V, f32, [H, F]>, %el: !graph.tensor<V, f32, [H]>, %er: !graph.tensor<V, f32, [H]>) -> (!graph.value<A, f32, [H, F]>, !graph.value<E, f32, [H]>) attributes {graph.param_names = ["h", "el", "er"], graph.result_names = ["out", "alpha"], graph.result_types = [!graph.tensor<V, f32, [H, F]>, !graph.tensor<E, f32, [H]>]} {
    %elu = graph.gather %el "src" : !graph.tensor<V, f32, [H]> -> !graph.value<S, f32, [H]>
    %erv = graph.gather %er "dst" : !graph.tensor<V, f32, [H]> -> !graph.value<D, f32, [H]>
    %s = graph.binary add %elu, %erv : (!graph.value<S, f32, [H]>, !graph.value<D, f32, [H]>) -> !graph.value<E, f32, [H]>
    %m = graph.aggregate max %s {stabilizer} : !graph.value<E, f32, [H]> -> !graph.value<A, f32, [H]>
    %shifted = graph.binary sub %s, %m : (!graph.value<E, f32, [H]>, !graph.value<A, f32, [H]>) -> !graph.value<E, f32, [H]>
    %ex = graph.unary exp %shifted : !graph.value<E, f32, [H]> -> !graph.value<E, f32, [H]>
    %z = graph.aggregate sum %ex : !graph.value<E, f32, [H]> -> !graph.value<A, f32, [H]>
    %tiny = graph.constant 1.000000e-30 : f32 : !graph.value<P, f32, []>
    %one = graph.constant 1.000000e+00 : f32 : !graph.value<P, f32, []>
    %safe_z = graph.binary max %z, %tiny : (!graph.value<A, f32, [H]>, !graph.value<P, f32, []>) -> !graph.value<A, f32, [H]>
    %inv_z = graph.binary div %one, %safe_z : (!graph.value<P, f32, []>, !graph.value<A, f32, [H]>) -> !graph.value<A, f32, [H]>
    %alpha = graph.binary mul %ex, %inv_z : (!graph.value<E, f32, [H]>, !graph.value<A, f32, [H]>) -> !graph.value<E, f32, [H]>
    %hu = graph.gather %h "src" : !graph.tensor<V, f32, [H, F]> -> !graph.value<S, f32, [H, F]>
    %weighted = graph.binary mul %ex, %hu : (!graph.value<E, f32, [H]>, !graph.value<S, f32, [H, F]>) -> !graph.value<E, f32, [H, F]>
    %num = graph.aggregate sum %weighted : !graph.value<E, f32, [H, F]> -> !graph.value<A, f32, [H, F]>
    %out = graph.binary mul %num, %inv_z : (!graph.value<A, f32, [H, F]>, !graph.value<A, f32, [H]>) -> !graph.value<A, f32, [H, F]>
    func.return %out, %alpha : !graph.value<A, f32, [H, F]>, !graph.value<E, f32, [H]>
  }
}

// CHECK-LABEL: func.func @gat
// CHECK-NEXT:    %elu = graph.gather %el "src" {fusion_group = 0 : i64, fusion_level = 1 : i64}
// CHECK-NEXT:    %erv = graph.gather %er "dst" {fusion_group = 0 : i64, fusion_level = 0 : i64}
// CHECK-NEXT:    %s = graph.binary add %elu, %erv {fusion_group = 0 : i64, fusion_level = 1 : i64}
// CHECK-NEXT:    %m = graph.aggregate max %s {fusion_group = 0 : i64, fusion_level = 1 : i64, stabilizer}
// CHECK-NEXT:    %shifted = graph.binary sub %s, %m {fusion_group = 0 : i64, fusion_level = 2 : i64}
// CHECK-NEXT:    %ex = graph.unary exp %shifted {fusion_group = 0 : i64, fusion_level = 2 : i64}
// CHECK-NEXT:    %z = graph.aggregate sum %ex {fusion_group = 0 : i64, fusion_level = 2 : i64}
// CHECK-NEXT:    %tiny = graph.constant 1.000000e-30 : f32 {fusion_group = 0 : i64, fusion_level = 0 : i64}
// CHECK-NEXT:    %one = graph.constant 1.000000e+00 : f32 {fusion_group = 0 : i64, fusion_level = 0 : i64}
// CHECK-NEXT:    %safe_z = graph.binary max %z, %tiny {fusion_group = 0 : i64, fusion_level = 0 : i64}
// CHECK-NEXT:    %inv_z = graph.binary div %one, %safe_z {fusion_group = 0 : i64, fusion_level = 0 : i64}
// CHECK-NEXT:    %alpha = graph.binary mul %ex, %inv_z {fusion_group = 0 : i64, fusion_level = 3 : i64}
// CHECK-NEXT:    %hu = graph.gather %h "src" {fusion_group = 0 : i64, fusion_level = 1 : i64}
// CHECK-NEXT:    %weighted = graph.binary mul %ex, %hu {fusion_group = 0 : i64, fusion_level = 2 : i64}
// CHECK-NEXT:    %num = graph.aggregate sum %weighted {fusion_group = 0 : i64, fusion_level = 2 : i64}
// CHECK-NEXT:    %out = graph.binary mul %num, %inv_z {fusion_group = 0 : i64, fusion_level = 0 : i64}
// CHECK-NEXT:    func.return %out, %alpha

// -----

// mlp_aggr after transform-before-gather: the transformed rows y = x @ W are
// materialised by nest 0 and read back by nest 1, which holds the edge work.

builtin.module {
  func.func @mlp_aggr(%x: !graph.tensor<V, f32, [D1]>, %W: !graph.tensor<P, f32, [D1, D2]>) -> !graph.value<A, f32, [D2]> attributes {graph.param_names = ["x", "W"], graph.result_names = ["out"], graph.result_types = [!graph.tensor<V, f32, [D2]>], graph.single_result} {
    %xv = graph.gather %x "dst" : !graph.tensor<V, f32, [D1]> -> !graph.value<D, f32, [D1]>
    %Wp = graph.gather %W "param" : !graph.tensor<P, f32, [D1, D2]> -> !graph.value<P, f32, [D1, D2]>
    %xW = graph.matvec %xv, %Wp : (!graph.value<D, f32, [D1]>, !graph.value<P, f32, [D1, D2]>) -> !graph.value<D, f32, [D2]>
    %y = graph.materialize %xW : !graph.value<D, f32, [D2]> -> !graph.tensor<V, f32, [D2]>
    %yu = graph.gather %y "src" : !graph.tensor<V, f32, [D2]> -> !graph.value<S, f32, [D2]>
    %yv = graph.gather %y "dst" : !graph.tensor<V, f32, [D2]> -> !graph.value<D, f32, [D2]>
    %e = graph.binary add %yu, %yv : (!graph.value<S, f32, [D2]>, !graph.value<D, f32, [D2]>) -> !graph.value<E, f32, [D2]>
    %r = graph.unary relu %e : !graph.value<E, f32, [D2]> -> !graph.value<E, f32, [D2]>
    %out = graph.aggregate max %r : !graph.value<E, f32, [D2]> -> !graph.value<A, f32, [D2]>
    func.return %out : !graph.value<A, f32, [D2]>
  }
}

// CHECK-LABEL: func.func @mlp_aggr
// CHECK-NEXT:    %xv = graph.gather %x "dst" {fusion_group = 0 : i64, fusion_level = 0 : i64}
// CHECK-NEXT:    %Wp = graph.gather %W "param" {fusion_group = 0 : i64, fusion_level = 0 : i64}
// CHECK-NEXT:    %xW = graph.matvec %xv, %Wp {fusion_group = 0 : i64, fusion_level = 0 : i64}
// CHECK-NEXT:    %y = graph.materialize %xW {fusion_group = 0 : i64, fusion_level = 0 : i64}
// CHECK-NEXT:    %yu = graph.gather %y "src" {fusion_group = 1 : i64, fusion_level = 1 : i64}
// CHECK-NEXT:    %yv = graph.gather %y "dst" {fusion_group = 1 : i64, fusion_level = 0 : i64}
// CHECK-NEXT:    %e = graph.binary add %yu, %yv {fusion_group = 1 : i64, fusion_level = 1 : i64}
// CHECK-NEXT:    %r = graph.unary relu %e {fusion_group = 1 : i64, fusion_level = 1 : i64}
// CHECK-NEXT:    %out = graph.aggregate max %r {fusion_group = 1 : i64, fusion_level = 1 : i64}
// CHECK-NEXT:    func.return %out
