// RUN: gnnc-opt %s -p expand-tanh | filecheck %s

// tanh(x), a = |x|: for a < 0.625, a + a s P(s) with s = a^2 (Cephes' odd
// polynomial for f32, a rational function P(s) / Q(s) for f64), which keeps
// the relative accuracy near 0; else 1 - 2 / (exp(2 min(a, 20)) + 1), leaving
// one math.exp for expand-exp. The sign is copied from x (-0 stays -0);
// NaN stays NaN.

func.func @tanhs(%x: f32, %y: f64) -> (f32, f64) {
  %tx = math.tanh %x : f32
  %ty = math.tanh %y : f64
  func.return %tx, %ty : f32, f64
}

// CHECK-LABEL: func.func @tanhs(
// CHECK-NEXT:    [[A:%.*]] = math.absf %x : f32
// CHECK-NEXT:    [[S:%.*]] = arith.mulf [[A]], [[A]] : f32
// CHECK-NEXT:    [[P4:%.*]] = arith.constant -0.00570498873 : f32
// CHECK-NEXT:    {{%.*}} = arith.mulf [[P4]], [[S]] : f32
// CHECK:         {{%.*}} = arith.constant -0.333332807 : f32
// CHECK-NEXT:    [[P:%.*]] = arith.addf {{%.*}}, {{%.*}} : f32
// CHECK-NEXT:    [[AS:%.*]] = arith.mulf [[A]], [[S]] : f32
// CHECK-NEXT:    [[ASP:%.*]] = arith.mulf [[AS]], [[P]] : f32
// CHECK-NEXT:    [[SMALL:%.*]] = arith.addf [[A]], [[ASP]] : f32
// CHECK-NEXT:    [[SAT:%.*]] = arith.constant 2.000000e+01 : f32
// CHECK-NEXT:    [[AC:%.*]] = arith.minnumf [[A]], [[SAT]] : f32
// CHECK-NEXT:    [[TWOA:%.*]] = arith.addf [[AC]], [[AC]] : f32
// CHECK-NEXT:    [[E2A:%.*]] = math.exp [[TWOA]] : f32
// CHECK-NEXT:    [[ONE:%.*]] = arith.constant 1.000000e+00 : f32
// CHECK-NEXT:    [[TWO:%.*]] = arith.constant 2.000000e+00 : f32
// CHECK-NEXT:    [[ONE2:%.*]] = arith.constant 1.000000e+00 : f32
// CHECK-NEXT:    [[DEN:%.*]] = arith.addf [[E2A]], [[ONE2]] : f32
// CHECK-NEXT:    [[Q:%.*]] = arith.divf [[TWO]], [[DEN]] : f32
// CHECK-NEXT:    [[LARGE:%.*]] = arith.subf [[ONE]], [[Q]] : f32
// CHECK-NEXT:    [[CUT:%.*]] = arith.constant 6.250000e-01 : f32
// CHECK-NEXT:    [[ISSMALL:%.*]] = arith.cmpf olt, [[A]], [[CUT]] : f32
// CHECK-NEXT:    [[MAG:%.*]] = arith.select [[ISSMALL]], [[SMALL]], [[LARGE]] : f32
// CHECK-NEXT:    [[SIGNED:%.*]] = math.copysign [[MAG]], %x : f32
// CHECK-NEXT:    [[ISNAN:%.*]] = arith.cmpf uno, %x, %x : f32
// CHECK-NEXT:    [[TX:%.*]] = arith.select [[ISNAN]], %x, [[SIGNED]] : f32
// CHECK-NEXT:    [[AY:%.*]] = math.absf %y : f64
// CHECK:         {{%.*}} = arith.constant -0.96439917942505227 : f64
// CHECK:         {{%.*}} = arith.constant 4844.063053251255 : f64
// CHECK-NEXT:    [[QS:%.*]] = arith.addf
// CHECK-NEXT:    {{%.*}} = arith.divf {{%.*}}, [[QS]] : f64
// CHECK:         {{%.*}} = math.exp {{%.*}} : f64
// CHECK:         [[TY:%.*]] = arith.select {{%.*}}, %y, {{%.*}} : f64
// CHECK-NEXT:    func.return [[TX]], [[TY]] : f32, f64
// CHECK-NOT:     math.tanh
