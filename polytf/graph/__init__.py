"""Graph IR: nodes, tensors and their static types, and fusion groups as values."""

from polytf.graph.fusion_group import FusionGroup
from polytf.graph.graph import Graph, Node, split_tensor_name, tensor_name
from polytf.graph.tensor_type import TensorType

__all__ = ["FusionGroup", "Graph", "Node", "TensorType", "split_tensor_name", "tensor_name"]
