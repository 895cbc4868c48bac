//! The pipeline as a petgraph DAG: edges point from a dependency to its dependent.

use std::collections::{BTreeSet, VecDeque};
use std::hash::BuildHasher;

use foldhash::{HashMap, HashMapExt};
use hashbrown::HashTable;

use petgraph::Direction;
use petgraph::algo::tarjan_scc;
use petgraph::graph::DiGraph;
pub use petgraph::graph::NodeIndex;

use crate::spec::{NodeId, NodeSpec, Origin, Pipeline};

/// Why a set of node specs does not form a DAG.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GraphError {
    #[error("node `{id}` is declared twice: at {first} and at {second}")]
    Duplicate {
        id: NodeId,
        first: Origin,
        second: Origin,
    },
    #[error("node `{id}` (at {origin}) depends on `{missing}`, which no node declares")]
    UnknownDep {
        id: NodeId,
        origin: Origin,
        missing: NodeId,
    },
    #[error("{}", describe_cycle(.0))]
    Cycle(Vec<(NodeId, Origin)>),
    #[error("target `{target}` names `{missing}`, which no node declares")]
    UnknownTargetNode { target: String, missing: NodeId },
}

fn describe_cycle(members: &[(NodeId, Origin)]) -> String {
    let mut text = String::from("dependency cycle through");
    for (id, origin) in members {
        text.push_str(&format!("\n  {id} (declared at {origin})"));
    }
    if let Some((first, _)) = members.first() {
        let path: Vec<&str> = members.iter().map(|(id, _)| id.as_str()).collect();
        text.push_str(&format!("\n  path: {} -> {first}", path.join(" -> ")));
    }
    text
}

/// A value for some of a graph's nodes, held by node index. A run and a plan keep one or more of these per
/// node: as hash maps they took a table of 2–5 MB each at 100 000 nodes and a hash on every look-up.
#[derive(Debug, Clone)]
pub(crate) struct NodeMap<V> {
    slots: Vec<Option<V>>,
}

impl<V> NodeMap<V> {
    /// An empty map with room for every node of `graph`.
    pub fn for_graph(graph: &Graph) -> NodeMap<V> {
        NodeMap {
            slots: std::iter::repeat_with(|| None).take(graph.len()).collect(),
        }
    }

    pub fn get(&self, index: NodeIndex) -> Option<&V> {
        self.slots.get(index.index())?.as_ref()
    }

    pub fn get_mut(&mut self, index: NodeIndex) -> Option<&mut V> {
        self.slots.get_mut(index.index())?.as_mut()
    }

    /// Sets the value of `index`, a node of the graph the map was made for, returning the one it replaces.
    pub fn insert(&mut self, index: NodeIndex, value: V) -> Option<V> {
        self.slots[index.index()].replace(value)
    }

    pub fn remove(&mut self, index: NodeIndex) -> Option<V> {
        self.slots.get_mut(index.index())?.take()
    }

    /// The nodes that have a value, by index.
    pub fn iter(&self) -> impl Iterator<Item = (NodeIndex, &V)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(position, slot)| Some((NodeIndex::new(position), slot.as_ref()?)))
    }

    pub fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.slots.iter().flatten()
    }
}

/// The hash `by_id` files a node under: its id's, with the hasher every map of ids here uses.
fn id_hash(id: &str) -> u64 {
    foldhash::fast::FixedState::default().hash_one(id)
}

/// The index of the node whose spec has `id`.
fn find<'t>(
    dag: &DiGraph<NodeSpec, ()>,
    by_id: &'t HashTable<NodeIndex>,
    id: &str,
) -> Option<&'t NodeIndex> {
    by_id.find(id_hash(id), |&index| dag[index].id == id)
}

/// A validated DAG over a pipeline's node specs (the default: the empty one).
#[derive(Debug, Clone, Default)]
pub struct Graph {
    dag: DiGraph<NodeSpec, ()>,
    /// Each node's index, found by the id its spec holds: a map keyed by id held every id a second time (the
    /// graph of a 30 000-node sweep took 10.0 MB of heap instead of 12.2, heaptrack).
    by_id: HashTable<NodeIndex>,
    /// Node indices in a topological order (dependencies first), fixed at build time.
    order: Vec<NodeIndex>,
}

impl Graph {
    /// Builds the DAG, reporting every duplicate and unknown dependency, or every cycle.
    pub fn build(nodes: Vec<NodeSpec>) -> Result<Graph, Vec<GraphError>> {
        let mut errors = Vec::new();
        let mut dag: DiGraph<NodeSpec, ()> = DiGraph::with_capacity(nodes.len(), nodes.len());
        let mut by_id: HashTable<NodeIndex> = HashTable::with_capacity(nodes.len());
        for spec in nodes {
            if let Some(&existing) = find(&dag, &by_id, &spec.id) {
                let first: &NodeSpec = &dag[existing];
                errors.push(GraphError::Duplicate {
                    id: spec.id.clone(),
                    first: first.origin.clone(),
                    second: spec.origin.clone(),
                });
                continue;
            }
            let hash = id_hash(&spec.id);
            let index = dag.add_node(spec);
            by_id.insert_unique(hash, index, |&other| id_hash(&dag[other].id));
        }
        let mut edges = Vec::new();
        for index in dag.node_indices() {
            let spec = &dag[index];
            for dep in &spec.deps {
                match find(&dag, &by_id, dep) {
                    Some(&from) => edges.push((from, index)),
                    None => errors.push(GraphError::UnknownDep {
                        id: spec.id.clone(),
                        origin: spec.origin.clone(),
                        missing: dep.clone(),
                    }),
                }
            }
        }
        // add_edge, not update_edge: update_edge scans the source's edges each time, which is quadratic for a
        // node with thousands of dependents. Duplicates are removed here instead.
        edges.sort_unstable();
        edges.dedup();
        for (from, to) in edges {
            dag.add_edge(from, to, ());
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        match declaration_order(&dag) {
            Some(order) => Ok(Graph { dag, by_id, order }),
            None => Err(cycles(&dag)),
        }
    }

    /// Builds the graph of a loaded pipeline and checks that every target names a node. The nodes move into
    /// the graph, which holds them from then on ([`Graph::specs`]): `pipeline.nodes` is left empty, so that a
    /// run does not hold (and a no-op does not copy) every spec twice.
    pub fn from_pipeline(pipeline: &mut Pipeline) -> Result<Graph, Vec<GraphError>> {
        let graph = Graph::build(std::mem::take(&mut pipeline.nodes))?;
        let errors: Vec<GraphError> = pipeline
            .targets
            .iter()
            .flat_map(|(target, ids)| {
                ids.iter().filter(|id| graph.index(id).is_none()).map(|id| {
                    GraphError::UnknownTargetNode {
                        target: target.clone(),
                        missing: id.clone(),
                    }
                })
            })
            .collect();
        if errors.is_empty() {
            Ok(graph)
        } else {
            Err(errors)
        }
    }

    pub fn len(&self) -> usize {
        self.dag.node_count()
    }

    pub fn is_empty(&self) -> bool {
        self.dag.node_count() == 0
    }

    pub fn index(&self, id: &str) -> Option<NodeIndex> {
        find(&self.dag, &self.by_id, id).copied()
    }

    pub fn spec(&self, index: NodeIndex) -> &NodeSpec {
        &self.dag[index]
    }

    /// Every node's spec, in declaration order.
    pub fn specs(&self) -> impl Iterator<Item = &NodeSpec> + '_ {
        self.dag.node_weights()
    }

    /// The specs back, in declaration order: what [`Graph::build`] takes to build the graph again after they
    /// are edited.
    pub fn into_specs(self) -> Vec<NodeSpec> {
        let (nodes, _) = self.dag.into_nodes_edges();
        nodes.into_iter().map(|node| node.weight).collect()
    }

    /// All nodes, dependencies before dependents.
    pub fn topological(&self) -> &[NodeIndex] {
        &self.order
    }

    /// Each node's place in [`Graph::topological`], by node index.
    pub fn positions(&self) -> Vec<usize> {
        let mut positions = vec![0; self.order.len()];
        for (position, index) in self.order.iter().enumerate() {
            positions[index.index()] = position;
        }
        positions
    }

    pub fn dependencies(&self, index: NodeIndex) -> impl Iterator<Item = NodeIndex> + '_ {
        self.dag.neighbors_directed(index, Direction::Incoming)
    }

    pub fn dependents(&self, index: NodeIndex) -> impl Iterator<Item = NodeIndex> + '_ {
        self.dag.neighbors_directed(index, Direction::Outgoing)
    }

    /// The given nodes and everything they need, as a set of indices (iterative, so deep chains are fine).
    pub fn closure(&self, roots: &[NodeIndex]) -> BTreeSet<NodeIndex> {
        // Marks in a vector, then one sorted collect: inserting each node into the set as it was reached was 4 %
        // of the instructions of a no-op of 10 000 nodes.
        let mut seen = vec![false; self.dag.node_count()];
        let mut stack: Vec<NodeIndex> = roots.to_vec();
        while let Some(index) = stack.pop() {
            if let Some(mark) = seen.get_mut(index.index())
                && !*mark
            {
                *mark = true;
                stack.extend(self.dependencies(index));
            }
        }
        seen.iter()
            .enumerate()
            .filter(|&(_, &mark)| mark)
            .map(|(position, _)| NodeIndex::new(position))
            .collect()
    }

    /// Graphviz text of the given nodes (all nodes when `only` is None).
    pub fn to_dot(&self, only: Option<&BTreeSet<NodeIndex>>) -> String {
        let keep = |i: NodeIndex| only.is_none_or(|set| set.contains(&i));
        let mut out = String::from("digraph fracflow {\n  rankdir=LR;\n  node [shape=box];\n");
        for &index in &self.order {
            if keep(index) {
                let spec = &self.dag[index];
                out.push_str(&format!(
                    "  {:?} [label={:?}];\n",
                    spec.id,
                    format!("{}\\n({})", spec.id, spec.kind)
                ));
            }
        }
        for edge in self.dag.raw_edges() {
            if keep(edge.source()) && keep(edge.target()) {
                out.push_str(&format!(
                    "  {:?} -> {:?};\n",
                    self.dag[edge.source()].id,
                    self.dag[edge.target()].id
                ));
            }
        }
        out.push_str("}\n");
        out
    }

    /// Mermaid flowchart text of the given nodes (all nodes when `only` is None).
    pub fn to_mermaid(&self, only: Option<&BTreeSet<NodeIndex>>) -> String {
        let keep = |i: NodeIndex| only.is_none_or(|set| set.contains(&i));
        let mut out = String::from("flowchart LR\n");
        for &index in &self.order {
            if keep(index) {
                let spec = &self.dag[index];
                out.push_str(&format!(
                    "  n{}[\"{} ({})\"]\n",
                    index.index(),
                    spec.id.replace('"', "'"),
                    spec.kind
                ));
            }
        }
        for edge in self.dag.raw_edges() {
            if keep(edge.source()) && keep(edge.target()) {
                out.push_str(&format!(
                    "  n{} --> n{}\n",
                    edge.source().index(),
                    edge.target().index()
                ));
            }
        }
        out
    }
}

/// Kahn's algorithm taking the earliest-declared ready node first, so plans and logs list nodes in the
/// order a reader wrote them (sweep points first key outermost); None when there is a cycle.
fn declaration_order(dag: &DiGraph<NodeSpec, ()>) -> Option<Vec<NodeIndex>> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut waiting: Vec<usize> = dag
        .node_indices()
        .map(|i| dag.neighbors_directed(i, Direction::Incoming).count())
        .collect();
    let mut ready: BinaryHeap<Reverse<NodeIndex>> = dag
        .node_indices()
        .filter(|i| waiting[i.index()] == 0)
        .map(Reverse)
        .collect();
    let mut order = Vec::with_capacity(dag.node_count());
    while let Some(Reverse(index)) = ready.pop() {
        order.push(index);
        for next in dag.neighbors_directed(index, Direction::Outgoing) {
            waiting[next.index()] -= 1;
            if waiting[next.index()] == 0 {
                ready.push(Reverse(next));
            }
        }
    }
    (order.len() == dag.node_count()).then_some(order)
}

/// Every cyclic strongly connected component, each as one concrete path through its members.
fn cycles(dag: &DiGraph<NodeSpec, ()>) -> Vec<GraphError> {
    let mut errors = Vec::new();
    for component in tarjan_scc(dag) {
        let is_cycle = component.len() > 1 || dag.contains_edge(component[0], component[0]);
        if !is_cycle {
            continue;
        }
        let members: BTreeSet<NodeIndex> = component.iter().copied().collect();
        let start = *members.iter().next().unwrap_or(&component[0]);
        let path = cycle_path(dag, start, &members);
        errors.push(GraphError::Cycle(
            path.into_iter()
                .map(|i| (dag[i].id.clone(), dag[i].origin.clone()))
                .collect(),
        ));
    }
    errors
}

/// A shortest path from `start` back to itself inside one component (BFS with predecessors).
fn cycle_path(
    dag: &DiGraph<NodeSpec, ()>,
    start: NodeIndex,
    members: &BTreeSet<NodeIndex>,
) -> Vec<NodeIndex> {
    let mut previous: HashMap<NodeIndex, NodeIndex> = HashMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for next in dag.neighbors_directed(node, Direction::Outgoing) {
            if !members.contains(&next) {
                continue;
            }
            if next == start {
                let mut path = vec![node];
                let mut cursor = node;
                while cursor != start {
                    cursor = previous[&cursor];
                    path.push(cursor);
                }
                path.reverse();
                return path;
            }
            if next != start && !previous.contains_key(&next) {
                previous.insert(next, node);
                queue.push_back(next);
            }
        }
    }
    members.iter().copied().collect()
}
