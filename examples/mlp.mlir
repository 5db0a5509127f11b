builtin.module {
  func.func @forward(%0: tensor<1024x512xf32> {graph.param = "fc1.weight"}, %1: tensor<1024xf32> {graph.param = "fc1.bias"}, %2: tensor<512x1024xf32> {graph.param = "fc2.weight"}, %3: tensor<512xf32> {graph.param = "fc2.bias"}, %4: tensor<64x512xf32> {graph.input = "x"}) -> tensor<64x512xf32> {
    %5 = graph.linear %4, %0 bias(%1 : tensor<1024xf32>) : tensor<64x512xf32>, tensor<1024x512xf32> -> tensor<64x1024xf32>
    %6 = graph.relu %5 : tensor<64x1024xf32>
    %7 = graph.linear %6, %2 bias(%3 : tensor<512xf32>) : tensor<64x1024xf32>, tensor<512x1024xf32> -> tensor<64x512xf32>
    func.return %7 : tensor<64x512xf32>
  }
}
