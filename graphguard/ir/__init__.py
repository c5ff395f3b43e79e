"""The common IR: graphs of dialect-qualified operators over (possibly symbolic) tensors."""
from .builder import GraphBuilder
from .expr import App, Leaf, Term, to_text
from .graph import Graph, Node, TensorInfo
from .ops import OpDef, Registry

__all__ = ["Graph", "Node", "TensorInfo", "OpDef", "Registry", "Term", "Leaf", "App", "to_text", "GraphBuilder"]
