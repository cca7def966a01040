"""An If's branch as a model of its own: what it reads from the enclosing graph becomes its
inputs (or, for constants, its initializers), so the fix-ups and the importer can treat it as
they treat a whole model, with static shapes where the enclosing graph has them."""

from __future__ import annotations

from collections.abc import Iterator

import onnx
from onnx import helper


def branches(node: onnx.NodeProto) -> Iterator[tuple[str, onnx.GraphProto]]:
    """(attribute name, graph) of each subgraph `node` holds (an If's then/else branch)."""
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            yield attribute.name, attribute.g


def outer_names(graph: onnx.GraphProto) -> list[str]:
    """The names `graph` (and the subgraphs in it) read from enclosing scopes, first use first."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    read: dict[str, None] = {}
    for node in graph.node:
        nested = [name for _, subgraph in branches(node) for name in outer_names(subgraph)]
        for name in [*node.input, *nested]:
            if name and name not in defined:
                read[name] = None
        defined.update(node.output)
    read.update((v.name, None) for v in graph.output if v.name not in defined)
    return list(read)


def branch_model(branch: onnx.GraphProto, inputs: list[onnx.ValueInfoProto],
                 initializers: list[onnx.TensorProto], opset_import) -> onnx.ModelProto:
    """`branch` as a model whose inputs and initializers are the outer values it reads. An
    output that is an outer value itself goes through an Identity (a graph cannot output its input)."""
    graph = onnx.GraphProto()
    graph.CopyFrom(branch)
    graph.name = branch.name or "branch"
    produced = {o for node in graph.node for o in node.output}
    for output in graph.output:
        if output.name not in produced:
            inner = f"{output.name}/branch"
            graph.node.append(helper.make_node("Identity", [output.name], [inner], name=inner))
            output.name = inner
    graph.input.extend(inputs)
    graph.initializer.extend(initializers)
    return helper.make_model(graph, opset_imports=opset_import)


def graph_key(graph: onnx.GraphProto) -> bytes:
    """What identifies a (sub)graph within its model: its content (sibling branches may reuse
    output names; identical branches are one graph)."""
    return graph.SerializeToString(deterministic=True)


def numbered_graphs(graph: onnx.GraphProto, first: int = 0) -> Iterator[tuple[onnx.GraphProto, int]]:
    """`graph`, then every If branch in it, depth first, each with the number of its first node:
    provenance numbers the nodes of a model's graphs in this one sequence."""
    yield graph, first
    first += len(graph.node)
    for node in graph.node:
        for _, subgraph in branches(node):
            yield from numbered_graphs(subgraph, first)
            first += node_count(subgraph)


def node_numbers(graph: onnx.GraphProto, first: int = 0) -> dict[tuple[str, ...], int]:
    """A node's outputs -> its number, for the nodes of `graph` and its branches."""
    return {tuple(node.output): start + i
            for g, start in numbered_graphs(graph, first) for i, node in enumerate(g.node)}


def node_count(graph: onnx.GraphProto) -> int:
    """Nodes in `graph` and its branches: numbered consecutively, from its first node on."""
    return len(graph.node) + sum(node_count(g) for node in graph.node for _, g in branches(node))


def all_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Every node of `model`, branches included, at its provenance number (`numbered_graphs`)."""
    return [node for graph, _ in numbered_graphs(model.graph) for node in graph.node]
