// RUN: xfuse-opt %s -p lower-to-loops | filecheck %s

// A scan: the parallel loop runs over the other dims, an scf.for along the scan's dim
// carries the running value (f32 for f16, as eager's CPU kernel) and stores it rounded at every
// step; no fastmath flag: the terms are added in eager's order.

// CHECK-LABEL: func.func @cumsum_k0
// CHECK-SAME:    (%[[X:.*]]: memref<4x8xf16>, %[[Y:.*]]: memref<4x8xf16>)
// CHECK:         %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK:         "scf.parallel"
// CHECK-NEXT:    ^{{.*}}(%[[I:.*]]: index):
// CHECK-NEXT:      scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[ACC:.*]] = %[[ZERO]]) -> (f32) {
// CHECK-NEXT:        %[[A:.*]] = memref.load %[[X]][%[[I]], %[[J]]] : memref<4x8xf16>
// CHECK-NEXT:        %[[B:.*]] = arith.extf %[[A]] : f16 to f32
// CHECK-NEXT:        %[[S:.*]] = arith.addf %[[ACC]], %[[B]] : f32
// CHECK-NEXT:        %[[R:.*]] = arith.truncf %[[S]] : f32 to f16
// CHECK-NEXT:        memref.store %[[R]], %[[Y]][%[[I]], %[[J]]] : memref<4x8xf16>
// CHECK-NEXT:        scf.yield %[[S]] : f32
func.func @cumsum(%x: tensor<4x8xf16>) -> tensor<4x8xf16> {
  %0 = graph.scan %x dim = 1 kind = "sum" : tensor<4x8xf16> -> tensor<4x8xf16>
  func.return %0 : tensor<4x8xf16>
}

// cummax's indices along dim 0: the value and the position are carried; the element is taken
// when it is NaN or >= the value so far (unless that is NaN), so ties and NaNs take the later.

// CHECK-LABEL: func.func @cummax_indices_k0
// CHECK:         %[[NEGINF:.*]] = arith.constant 0xff800000 : f32
// CHECK:         %[[C0:.*]] = arith.constant 0 : i64
// CHECK:         scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[V:.*]] = %[[NEGINF]], %[[P:.*]] = %[[C0]]) -> (f32, i64) {
// CHECK-NEXT:      %[[X:.*]] = memref.load %{{.*}}[%[[J]], %{{.*}}] : memref<4x8xf32>
// CHECK-NEXT:      %[[XNAN:.*]] = arith.cmpf uno, %[[X]], %[[X]] : f32
// CHECK-NEXT:      %[[VORD:.*]] = arith.cmpf ord, %[[V]], %[[V]] : f32
// CHECK-NEXT:      %[[GE:.*]] = arith.cmpf oge, %[[X]], %[[V]] : f32
// CHECK-NEXT:      %[[AND:.*]] = arith.andi %[[VORD]], %[[GE]] : i1
// CHECK-NEXT:      %[[TAKE:.*]] = arith.ori %[[XNAN]], %[[AND]] : i1
// CHECK-NEXT:      %[[NV:.*]] = arith.select %[[TAKE]], %[[X]], %[[V]] : f32
// CHECK-NEXT:      %[[HERE:.*]] = arith.index_cast %[[J]] : index to i64
// CHECK-NEXT:      %[[NP:.*]] = arith.select %[[TAKE]], %[[HERE]], %[[P]] : i64
// CHECK-NEXT:      memref.store %[[NP]], %{{.*}}[%[[J]], %{{.*}}] : memref<4x8xi64>
// CHECK-NEXT:      scf.yield %[[NV]], %[[NP]] : f32, i64
func.func @cummax_indices(%x: tensor<4x8xf32>) -> tensor<4x8xi64> {
  %0 = graph.scan %x dim = 0 kind = "argmax" : tensor<4x8xf32> -> tensor<4x8xi64>
  func.return %0 : tensor<4x8xi64>
}

// logcumsumexp: log1p(exp(lo - hi)) + hi, or the element when both are the same infinity.

// CHECK-LABEL: func.func @logcumsumexp_k0
// CHECK:         math.exp
// CHECK-NEXT:    math.log1p
// CHECK-NEXT:    arith.addf
// CHECK-NEXT:    arith.cmpf une
// CHECK-NEXT:    math.absf
// CHECK-NEXT:    arith.cmpf one
// CHECK-NEXT:    arith.ori
// CHECK-NEXT:    arith.select
func.func @logcumsumexp(%x: tensor<3x5xf32>) -> tensor<3x5xf32> {
  %0 = graph.scan %x dim = 1 kind = "logsumexp" : tensor<3x5xf32> -> tensor<3x5xf32>
  func.return %0 : tensor<3x5xf32>
}
