// RUN: gnnc-opt %s -p expand-log | filecheck %s

// log(x) = k ln 2 + log(1 + f): a subnormal x is first scaled into the normal
// range (by 2^24 for f32, 2^54 for f64, taken off k again); x's bits give k
// and a mantissa m in [sqrt(1/2), sqrt(2)), f = m - 1; log(1 + f) by Cephes'
// polynomial in f (f32) or fdlibm's in s = f / (2 + f) (f64); then the IEEE
// cases: +inf for +inf, -inf for 0, NaN for x < 0, NaN stays NaN. Only log
// is expanded.

func.func @logs(%x: f32, %y: f64, %e: f32) -> (f32, f64, f32) {
  %lx = math.log %x : f32
  %ly = math.log %y : f64
  %ee = math.exp %e : f32
  func.return %lx, %ly, %ee : f32, f64, f32
}

// CHECK-LABEL: func.func @logs(
// CHECK-NEXT:    [[TINY:%.*]] = arith.constant 1.17549435e-38 : f32
// CHECK-NEXT:    [[SUB:%.*]] = arith.cmpf olt, %x, [[TINY]] : f32
// CHECK-NEXT:    [[TWO24:%.*]] = arith.constant 0x4B800000 : f32
// CHECK-NEXT:    [[SCALED:%.*]] = arith.mulf %x, [[TWO24]] : f32
// CHECK-NEXT:    [[XS:%.*]] = arith.select [[SUB]], [[SCALED]], %x : f32
// CHECK-NEXT:    [[BITS:%.*]] = arith.bitcast [[XS]] : f32 to i32
// CHECK-NEXT:    [[CARRY:%.*]] = arith.constant 4913933 : i32
// CHECK-NEXT:    [[B:%.*]] = arith.addi [[BITS]], [[CARRY]] : i32
// CHECK-NEXT:    [[M:%.*]] = arith.constant 23 : i32
// CHECK-NEXT:    [[EXP:%.*]] = arith.shrsi [[B]], [[M]] : i32
// CHECK-NEXT:    [[BIAS:%.*]] = arith.constant 127 : i32
// CHECK-NEXT:    [[K0:%.*]] = arith.subi [[EXP]], [[BIAS]] : i32
// CHECK-NEXT:    [[S24:%.*]] = arith.constant 24 : i32
// CHECK-NEXT:    [[Z:%.*]] = arith.constant 0 : i32
// CHECK-NEXT:    [[UNSCALE:%.*]] = arith.select [[SUB]], [[S24]], [[Z]] : i32
// CHECK-NEXT:    [[K:%.*]] = arith.subi [[K0]], [[UNSCALE]] : i32
// CHECK:         [[F:%.*]] = arith.subf {{%.*}}, {{%.*}} : f32
// CHECK-NEXT:    [[KF:%.*]] = arith.sitofp [[K]] : i32 to f32
// CHECK-NEXT:    {{%.*}} = arith.mulf [[F]], [[F]] : f32
// CHECK-NEXT:    {{%.*}} = arith.constant 0.0703768358 : f32
// CHECK:         [[LN2HI:%.*]] = arith.constant 0.693359375 : f32
// CHECK-NEXT:    {{%.*}} = arith.mulf [[KF]], [[LN2HI]] : f32
// CHECK-NEXT:    [[R0:%.*]] = arith.addf
// CHECK-NEXT:    [[PINF:%.*]] = arith.constant 0x7f800000 : f32
// CHECK-NEXT:    [[ISINF:%.*]] = arith.cmpf oeq, %x, [[PINF]] : f32
// CHECK-NEXT:    {{%.*}} = arith.constant 0x7f800000 : f32
// CHECK-NEXT:    [[R1:%.*]] = arith.select [[ISINF]], {{%.*}}, [[R0]] : f32
// CHECK-NEXT:    [[ZERO:%.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT:    [[ISZERO:%.*]] = arith.cmpf oeq, %x, [[ZERO]] : f32
// CHECK-NEXT:    [[NINF:%.*]] = arith.constant 0xff800000 : f32
// CHECK-NEXT:    [[R2:%.*]] = arith.select [[ISZERO]], [[NINF]], [[R1]] : f32
// CHECK-NEXT:    {{%.*}} = arith.constant 0.000000e+00 : f32
// CHECK-NEXT:    [[ISNEG:%.*]] = arith.cmpf olt, %x, {{%.*}} : f32
// CHECK-NEXT:    [[NAN:%.*]] = arith.constant 0x7fc00000 : f32
// CHECK-NEXT:    [[R3:%.*]] = arith.select [[ISNEG]], [[NAN]], [[R2]] : f32
// CHECK-NEXT:    [[ISNAN:%.*]] = arith.cmpf uno, %x, %x : f32
// CHECK-NEXT:    [[LX:%.*]] = arith.select [[ISNAN]], %x, [[R3]] : f32
// CHECK-NEXT:    {{%.*}} = arith.constant 2.2250738585072014e-308 : f64
// CHECK:         arith.constant 52 : i64
// CHECK:         [[TWOF:%.*]] = arith.addf {{%.*}}, [[FY:%.*]] : f64
// CHECK-NEXT:    {{%.*}} = arith.divf [[FY]], [[TWOF]] : f64
// CHECK:         arith.constant 0.66666666666667351 : f64
// CHECK:         [[LY:%.*]] = arith.select {{%.*}}, %y, {{%.*}} : f64
// CHECK-NEXT:    %ee = math.exp %e : f32
// CHECK-NEXT:    func.return [[LX]], [[LY]], %ee : f32, f64, f32
// CHECK-NOT:     math.log
