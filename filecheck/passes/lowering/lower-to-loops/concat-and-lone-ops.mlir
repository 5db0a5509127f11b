// RUN: xfuse-opt %s -p lower-to-loops | filecheck %s

// concat is an scf.if on the concatenated index; lone ops become kernels of their own, externs
// stay, splat constants become arith.constant, bool buffers are i8.

func.func @concat(%a: tensor<2x3xf32>, %b: tensor<2x2xf32>) -> tensor<2x5xf32> {
  %r = fusion.group (%a, %b) kind = "injective" rule = "test" : (tensor<2x3xf32>, tensor<2x2xf32>) -> tensor<2x5xf32> {
  ^bb0(%x: tensor<2x3xf32>, %y: tensor<2x2xf32>):
    %e = graph.exp %y : tensor<2x2xf32>
    %c = graph.concat %x, %e dim = 1 : tensor<2x3xf32>, tensor<2x2xf32> -> tensor<2x5xf32>
    fusion.yield %c : tensor<2x5xf32>
  }
  func.return %r : tensor<2x5xf32>
}

func.func @lone(%x: tensor<4x8xf32>, %w: tensor<8x2xf32>, %m: tensor<4x2xi1>) -> tensor<4x2xf32> {
  %c = graph.constant dense<0.5> : tensor<f32>
  %y = graph.mul %x, %c : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  %z = graph.matmul %y, %w : tensor<4x8xf32>, tensor<8x2xf32> -> tensor<4x2xf32>
  %zero = graph.constant dense<0.0> : tensor<f32>
  %o = graph.where %m, %z, %zero : tensor<4x2xi1>, tensor<4x2xf32>, tensor<f32> -> tensor<4x2xf32>
  func.return %o : tensor<4x2xf32>
}

// CHECK:      func.func @lone(%x: tensor<4x8xf32>, %w: tensor<8x2xf32>, %m: tensor<4x2xi1>) -> tensor<4x2xf32> {
// CHECK-NEXT:   %y = fusion.launch @lone_k0(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:   %z = graph.matmul %y, %w : tensor<4x8xf32>, tensor<8x2xf32> -> tensor<4x2xf32>
// CHECK-NEXT:   %o = fusion.launch @lone_k1(%m, %z) : (tensor<4x2xi1>, tensor<4x2xf32>) -> tensor<4x2xf32>
// CHECK-NEXT:   func.return %o : tensor<4x2xf32>
// CHECK-NEXT: }

// CHECK:      func.func @concat_k0(%[[A:.*]]: memref<2x3xf32>, %[[B:.*]]: memref<2x2xf32>, %[[OUT:.*]]: memref<2x5xf32>)
// CHECK-DAG:    %[[C3:.*]] = arith.constant 3 : index
// CHECK-DAG:    %[[CM3:.*]] = arith.constant -3 : index
// CHECK:        ^bb0(%[[I:.*]]: index, %[[J:.*]]: index):
// CHECK-NEXT:     %[[IN_A:.*]] = arith.cmpi ult, %[[J]], %[[C3]] : index
// CHECK-NEXT:     %[[JB:.*]] = arith.addi %[[J]], %[[CM3]] : index
// CHECK-NEXT:     %[[V:.*]] = scf.if %[[IN_A]] -> (f32) {
// CHECK-NEXT:       %[[VA:.*]] = memref.load %[[A]][%[[I]], %[[J]]] : memref<2x3xf32>
// CHECK-NEXT:       scf.yield %[[VA]] : f32
// CHECK-NEXT:     } else {
// CHECK-NEXT:       %[[VB:.*]] = memref.load %[[B]][%[[I]], %[[JB]]] : memref<2x2xf32>
// CHECK-NEXT:       %[[E:.*]] = math.exp %[[VB]] : f32
// CHECK-NEXT:       scf.yield %[[E]] : f32
// CHECK-NEXT:     }
// CHECK-NEXT:     memref.store %[[V]], %[[OUT]][%[[I]], %[[J]]] : memref<2x5xf32>

// CHECK:      func.func @lone_k0(%[[X:.*]]: memref<32xf32>, %[[OUT:.*]]: memref<32xf32>)
// CHECK:        %[[HALF:.*]] = arith.constant 5.000000e-01 : f32
// CHECK:          %[[V:.*]] = memref.load %[[X]][%[[F:.*]]] : memref<32xf32>
// CHECK-NEXT:     %[[P:.*]] = arith.mulf %[[V]], %[[HALF]] : f32
// CHECK-NEXT:     memref.store %[[P]], %[[OUT]][%[[F]]] : memref<32xf32>

// CHECK:      func.func @lone_k1(%[[M:.*]]: memref<8xi8>, %[[Z:.*]]: memref<8xf32>, %[[OUT:.*]]: memref<8xf32>)
// CHECK-DAG:    %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK:          %[[MB:.*]] = memref.load %[[M]][%[[F:.*]]] : memref<8xi8>
// CHECK-NEXT:     %[[MI:.*]] = arith.trunci %[[MB]] : i8 to i1
// CHECK-NEXT:     %[[ZV:.*]] = memref.load %[[Z]][%[[F]]] : memref<8xf32>
// CHECK-NEXT:     %[[S:.*]] = arith.select %[[MI]], %[[ZV]], %[[ZERO]] : f32
// CHECK-NEXT:     memref.store %[[S]], %[[OUT]][%[[F]]] : memref<8xf32>
