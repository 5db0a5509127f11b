// RUN: xfuse-opt %s -p lower-to-loops | filecheck %s
// RUN: xfuse-opt %s -p 'lower-to-loops{wide_sums=false}' | filecheck %s --check-prefix=NARROW

// A sum of at most 64 f32 terms per row over several loops (summed in blocks, one partial
// sum per inner loop) accumulates in f64 and is rounded once; a row of one loop keeps f32.
func.func @channels(%x: tensor<5x5x6xf32>) -> tensor<5xf32> {
  %r = fusion.group (%x) kind = "reduction" rule = "test" : (tensor<5x5x6xf32>) -> tensor<5xf32> {
  ^bb0(%a: tensor<5x5x6xf32>):
    %s = graph.reduce_sum %a dims = [0, 2] : tensor<5x5x6xf32> -> tensor<5xf32>
    fusion.yield %s : tensor<5xf32>
  }
  func.return %r : tensor<5xf32>
}

func.func @rows(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  %r = fusion.group (%x) kind = "reduction" rule = "test" : (tensor<4x8xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4x8xf32>):
    %s = graph.reduce_sum %a dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
    fusion.yield %s : tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}

// CHECK:      func.func @channels_k0(
// CHECK:        %[[SUM:.*]] = scf.for {{.*}} -> (f64) {
// CHECK:          %[[PART:.*]] = scf.for {{.*}} -> (f64) {
// CHECK:            %[[V:.*]] = memref.load
// CHECK-NEXT:       %[[W:.*]] = arith.extf %[[V]] : f32 to f64
// CHECK-NEXT:       arith.addf {{.*}}, %[[W]] fastmath<reassoc> : f64
// CHECK:          arith.addf {{.*}}, %[[PART]] fastmath<reassoc> : f64
// CHECK:        %[[R:.*]] = arith.truncf %[[SUM]] : f64 to f32
// CHECK-NEXT:   memref.store %[[R]]
// CHECK:      func.func @rows_k0(
// CHECK:        scf.for {{.*}} -> (f32) {
// CHECK-NOT:    f64

// NARROW:     func.func @channels_k0(
// NARROW-NOT: f64
// NARROW:     func.func @rows_k0(

// A run of adjacent reduced dims of at most 64 elements (a global average pool's 7x7) is one
// loop where it sums in f64, and a loop per dim in f32.
func.func @pool(%x: tensor<2x3x7x7xf32>) -> tensor<2x3xf32> {
  %r = fusion.group (%x) kind = "reduction" rule = "test" : (tensor<2x3x7x7xf32>) -> tensor<2x3xf32> {
  ^bb0(%a: tensor<2x3x7x7xf32>):
    %m = graph.reduce_mean %a dims = [2, 3] : tensor<2x3x7x7xf32> -> tensor<2x3xf32>
    fusion.yield %m : tensor<2x3xf32>
  }
  func.return %r : tensor<2x3xf32>
}

// CHECK:      func.func @pool_k0(%{{.*}}: memref<2x3x49xf32>,
// CHECK:        %[[N:.*]] = arith.constant 49 : index
// CHECK:        scf.for {{.*}} to %[[N]] {{.*}} -> (f64) {
// CHECK-NOT:    scf.for
// CHECK:        arith.truncf {{.*}} : f64 to f32

// NARROW:     func.func @pool_k0(%{{.*}}: memref<2x3x7x7xf32>,
// NARROW:       scf.for {{.*}} -> (f32) {
// NARROW:         scf.for {{.*}} -> (f32) {
// NARROW-NOT: f64

// A sum to one value of fewer than 65,536 f32 terms (here 256, past the 64 of a short sum)
// accumulates in f64, however it is looped over.
func.func @total(%x: tensor<16x16xf32>) -> tensor<f32> {
  %r = fusion.group (%x) kind = "reduction" rule = "test" : (tensor<16x16xf32>) -> tensor<f32> {
  ^bb0(%a: tensor<16x16xf32>):
    %s = graph.reduce_sum %a dims = [0, 1] : tensor<16x16xf32> -> tensor<f32>
    fusion.yield %s : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// CHECK:      func.func @total_k0(
// CHECK:        scf.for {{.*}} -> (f64) {
// CHECK:        arith.truncf {{.*}} : f64 to f32

// NARROW:     func.func @total_k0(
// NARROW-NOT: f64
