// RUN: gnnc-opt %s -p expand-exp | filecheck %s

// exp(x) = 2^k exp(r): x clamped to where f32 / f64 exp is finite and not
// zero, k = floor(x / ln 2 + 1/2), r = x - k ln 2 in two fused steps (ln 2
// split in a high and a low part), exp(r) by a polynomial (Cephes' degree 5
// by Estrin's scheme for f32, Taylor to degree 13 for f64), and 2^k built
// from exponent bits in two halves. Above the largest finite x the result is
// +inf; NaN stays NaN. An exp of another type (f16) is left to LLVM.

func.func @exps(%x: f32, %y: f64, %h: f16) -> (f32, f64, f16) {
  %ex = math.exp %x : f32
  %ey = math.exp %y : f64
  %eh = math.exp %h : f16
  func.return %ex, %ey, %eh : f32, f64, f16
}

// CHECK-LABEL: func.func @exps(
// CHECK-NEXT:    [[LO:%.*]] = arith.constant -1.040000e+02 : f32
// CHECK-NEXT:    [[XLO:%.*]] = arith.maxnumf %x, [[LO]] : f32
// CHECK-NEXT:    [[HI:%.*]] = arith.constant 88.7228394 : f32
// CHECK-NEXT:    [[XC:%.*]] = arith.minnumf [[XLO]], [[HI]] : f32
// CHECK-NEXT:    [[LOG2E:%.*]] = arith.constant 1.44269502 : f32
// CHECK-NEXT:    [[HALF:%.*]] = arith.constant 5.000000e-01 : f32
// CHECK-NEXT:    [[KH:%.*]] = math.fma [[XC]], [[LOG2E]], [[HALF]] : f32
// CHECK-NEXT:    [[K:%.*]] = math.floor [[KH]] : f32
// CHECK-NEXT:    [[LN2HI:%.*]] = arith.constant -0.693359375 : f32
// CHECK-NEXT:    [[R1:%.*]] = math.fma [[K]], [[LN2HI]], [[XC]] : f32
// CHECK-NEXT:    [[LN2LO:%.*]] = arith.constant 0.000212194442 : f32
// CHECK-NEXT:    [[R:%.*]] = math.fma [[K]], [[LN2LO]], [[R1]] : f32
// CHECK:         {{%.*}} = arith.mulf [[R]], [[R]] : f32
// CHECK:         [[KI:%.*]] = arith.fptosi [[K]] : f32 to i32
// CHECK-NEXT:    [[ONE:%.*]] = arith.constant 1 : i32
// CHECK-NEXT:    [[KHALF:%.*]] = arith.shrsi [[KI]], [[ONE]] : i32
// CHECK-NEXT:    {{%.*}} = arith.subi [[KI]], [[KHALF]] : i32
// CHECK-NEXT:    [[BIAS:%.*]] = arith.constant 127 : i32
// CHECK-NEXT:    [[E1:%.*]] = arith.addi [[KHALF]], [[BIAS]] : i32
// CHECK-NEXT:    [[M:%.*]] = arith.constant 23 : i32
// CHECK-NEXT:    [[BITS:%.*]] = arith.shli [[E1]], [[M]] : i32
// CHECK-NEXT:    {{%.*}} = arith.bitcast [[BITS]] : i32 to f32
// CHECK:         [[BIG:%.*]] = arith.cmpf ogt, %x, {{%.*}} : f32
// CHECK-NEXT:    [[INF:%.*]] = arith.constant 0x7f800000 : f32
// CHECK-NEXT:    [[FINITE:%.*]] = arith.select [[BIG]], [[INF]], {{%.*}} : f32
// CHECK-NEXT:    [[ISNAN:%.*]] = arith.cmpf uno, %x, %x : f32
// CHECK-NEXT:    [[EX:%.*]] = arith.select [[ISNAN]], %x, [[FINITE]] : f32
// CHECK-NEXT:    {{%.*}} = arith.constant -7.452000e+02 : f64
// CHECK-NEXT:    {{%.*}} = arith.maxnumf %y
// CHECK:         arith.constant 1.4426950408889634 : f64
// CHECK:         arith.constant 1.6059043836821613e-10 : f64
// CHECK:         arith.constant 1023 : i64
// CHECK-NEXT:    {{%.*}} = arith.addi
// CHECK-NEXT:    {{%.*}} = arith.constant 52 : i64
// CHECK:         arith.constant 0x7ff0000000000000 : f64
// CHECK:         [[EY:%.*]] = arith.select {{%.*}}, %y, {{%.*}} : f64
// CHECK-NEXT:    %eh = math.exp %h : f16
// CHECK-NEXT:    func.return [[EX]], [[EY]], %eh : f32, f64, f16
