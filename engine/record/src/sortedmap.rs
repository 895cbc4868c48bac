//! A small map from names to values, kept as one vector sorted by name: what a node's settings, its sweep
//! point and its outputs are. A `BTreeMap`'s smallest node has room for eleven entries (about 640 bytes for
//! one setting), and a loaded million-point sweep holds several of these maps per node, which made them most
//! of a node's memory. Iterates, serialises and compares exactly as a `BTreeMap<String, V>` does, so keys and
//! files stay what they were.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut, Index};

use litemap::LiteMap;
use serde::{Deserialize, Serialize};

/// Names to values, sorted by name, each name once. Derefs to [`LiteMap`] for `get`, `insert`, `iter` and the
/// rest; adds what the engine's `BTreeMap`s offered besides (indexing by `&str`, `for` over a reference).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(transparent)]
pub struct SortedMap<V>(LiteMap<String, V>);

/// Always a map. `LiteMap` writes an empty map as a sequence in JSON (it cannot tell from an empty map whether
/// its keys could be a JSON object's), and `{}` must stay `{}` in entries and manifests.
impl<V: Serialize> Serialize for SortedMap<V> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self)
    }
}

impl<V> SortedMap<V> {
    pub fn new() -> Self {
        SortedMap(LiteMap::new())
    }

    /// Here as well as through `Deref`, so serde's `skip_serializing_if` can name it.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A copy as a `BTreeMap`, for the records that keep one (a measurement's or a command's sweep point).
    pub fn to_btree_map(&self) -> BTreeMap<String, V>
    where
        V: Clone,
    {
        self.iter()
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect()
    }
}

impl<V> Default for SortedMap<V> {
    fn default() -> Self {
        SortedMap::new()
    }
}

impl<V> Deref for SortedMap<V> {
    type Target = LiteMap<String, V>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl<V> DerefMut for SortedMap<V> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// Panics when `name` is missing, as indexing a `BTreeMap` does: for code that has just checked it is there.
impl<V, Q> Index<&Q> for SortedMap<V>
where
    String: Borrow<Q>,
    Q: Ord + ?Sized,
{
    type Output = V;

    fn index(&self, name: &Q) -> &V {
        match self.0.get(name) {
            Some(value) => value,
            None => panic!("no entry of that name in the map"),
        }
    }
}

/// Later entries win over earlier ones of the same name, as collecting into a `BTreeMap` does.
impl<V> FromIterator<(String, V)> for SortedMap<V> {
    fn from_iter<I: IntoIterator<Item = (String, V)>>(entries: I) -> Self {
        // Sized from the iterator first: collected as it comes, a map of one entry took room for four (the
        // vector's smallest growth), and a no-op records one such map per cached node.
        let entries = entries.into_iter();
        let mut map = LiteMap::with_capacity(entries.size_hint().0);
        map.extend(entries);
        SortedMap(map)
    }
}

impl<V, const N: usize> From<[(String, V); N]> for SortedMap<V> {
    fn from(entries: [(String, V); N]) -> Self {
        entries.into_iter().collect()
    }
}

impl<V> Extend<(String, V)> for SortedMap<V> {
    fn extend<I: IntoIterator<Item = (String, V)>>(&mut self, entries: I) {
        self.0.extend(entries);
    }
}

type Pair<'a, V> = (&'a String, &'a V);

impl<'a, V> IntoIterator for &'a SortedMap<V> {
    type Item = Pair<'a, V>;
    type IntoIter =
        std::iter::Map<std::slice::Iter<'a, (String, V)>, fn(&'a (String, V)) -> Pair<'a, V>>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.as_slice().iter().map(|(name, value)| (name, value))
    }
}

impl<V> IntoIterator for SortedMap<V> {
    type Item = (String, V);
    type IntoIter = std::vec::IntoIter<(String, V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_tuple_vec().into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_reads_and_writes_as_a_btree_map_does() -> serde_json::Result<()> {
        let entries = [("b", 2), ("a", 1), ("c", 3), ("a", 4)].map(|(k, v)| (k.to_owned(), v));
        let tree: BTreeMap<String, i32> = entries.clone().into_iter().collect();
        let sorted: SortedMap<i32> = entries.into_iter().collect();
        assert_eq!(
            serde_json::to_string(&sorted)?,
            serde_json::to_string(&tree)?
        );
        assert!(sorted.iter().eq(tree.iter()));
        assert!((&sorted).into_iter().eq(&tree));
        assert_eq!(sorted.to_btree_map(), tree);
        assert_eq!(sorted["a"], 4);
        let mut named = Vec::new();
        rmp_serde::encode::write_named(&mut named, &tree).map_err(serde::ser::Error::custom)?;
        let decoded: SortedMap<i32> =
            rmp_serde::from_slice(&named).map_err(serde::de::Error::custom)?;
        assert_eq!(decoded, sorted);
        assert_eq!(serde_json::to_string(&SortedMap::<i32>::new())?, "{}");
        let unsorted: SortedMap<i32> = serde_json::from_str(r#"{"c":3,"a":1,"b":2}"#)?;
        assert!(unsorted.keys().eq(["a", "b", "c"]));
        Ok(())
    }
}
