"""Graph IR: nodes, tensors and their static types."""

from polytf.graph.graph import Graph, Node, split_tensor_name, tensor_name
from polytf.graph.tensor_type import TensorType

__all__ = ["Graph", "Node", "TensorType", "split_tensor_name", "tensor_name"]
