//! The `plot` node's configuration: what to draw from which columns.

use std::fmt;
use std::marker::PhantomData;

use fracflow_record::Cell;
use serde::Deserialize;
use serde::de::{MapAccess, Visitor};

/// The `plot` node's YAML config (the engine deserialises it from JSON): one figure, which table, which columns on
/// which axes, and how rows split into series, panels and bars. The format is in the crate docs.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlotSpec {
    /// The file stem: `<figure>.svg`, `<figure>.png`, `<figure>.pdf`.
    pub figure: String,
    #[serde(default)]
    pub title: Option<String>,
    /// The name of the table to read (`summary`, `cdf`, …).
    #[serde(default = "default_table")]
    pub table: String,
    pub style: Style,
    /// Required for `lines` and `cdf`; for `bars` only its `label` is used (the positions come from `categories`).
    #[serde(default)]
    pub x: Option<AxisSpec>,
    pub y: AxisSpec,
    #[serde(default)]
    pub band: Option<BandSpec>,
    /// `bars`: the column holding each bar's ± error.
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub series: Option<Grouping>,
    #[serde(default)]
    pub panels: Option<PanelSpec>,
    /// Keeps only the rows whose cell equals the value in each named column (numbers compare numerically).
    #[serde(default, rename = "where", deserialize_with = "ordered_map")]
    pub filter: Vec<(String, Cell)>,
    /// `bars`: the bar positions along x.
    #[serde(default)]
    pub categories: Option<Grouping>,
    /// `bars`: an outer grouping of the categories (side by side, labelled under the axis).
    #[serde(default)]
    pub groups: Option<Grouping>,
    /// `bars`: rows drawn as dashed outlines instead of filled bars.
    #[serde(default)]
    pub outline: Option<OutlineSpec>,
}

fn default_table() -> String {
    "summary".to_owned()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Style {
    /// A line per series through (x, y), optionally with a shaded band.
    Lines,
    /// Bars per category (and group), one colour per series, optional error bars and outline bars.
    Bars,
    /// A step line per series through (x, cumulative fraction).
    Cdf,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AxisSpec {
    pub column: String,
    /// The axis description; the column name when absent.
    #[serde(default)]
    pub label: Option<String>,
    #[serde(default)]
    pub scale: Scale,
    /// Fixed limits; otherwise fitted to the data of all panels (so panels compare).
    #[serde(default)]
    pub range: Option<[f64; 2]>,
    #[serde(default, rename = "break")]
    pub axis_break: Option<AxisBreak>,
}

impl AxisSpec {
    pub(crate) fn description(&self) -> &str {
        self.label.as_deref().unwrap_or(&self.column)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    #[default]
    Linear,
    Log,
}

/// Two ranges of one axis drawn as two sub-plots: `below`/`above` on y (stacked), `left`/`right` on x (side by side).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AxisBreak {
    #[serde(default)]
    pub below: Option<[f64; 2]>,
    #[serde(default)]
    pub above: Option<[f64; 2]>,
    #[serde(default)]
    pub left: Option<[f64; 2]>,
    #[serde(default)]
    pub right: Option<[f64; 2]>,
}

/// `lines`: a shaded band between two columns (e.g. p25–p75) around each series' line.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BandSpec {
    pub lo: String,
    pub hi: String,
    /// A legend entry for the band, e.g. `p25–p75`; none when absent.
    #[serde(default)]
    pub label: Option<String>,
}

/// The distinct values of a column, in a chosen order and with display names.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grouping {
    pub column: String,
    /// Values listed here come first, in this order, even when no row has them; other values follow.
    #[serde(default)]
    pub order: Option<Vec<Cell>>,
    /// Display names by value. Without `order`, the values named here come first, in the order written.
    #[serde(default)]
    pub names: Names,
}

/// A value → display name map that keeps the order in which it was written.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Names(pub Vec<(String, String)>);

impl Names {
    pub(crate) fn get(&self, value: &Cell) -> Option<&str> {
        self.0
            .iter()
            .find(|(key, _)| cells_equal(&Cell::Text(key.clone()), value))
            .map(|(_, name)| name.as_str())
    }
}

impl<'de> Deserialize<'de> for Names {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Names, D::Error> {
        let pairs: Vec<(Cell, Cell)> = ordered_map(deserializer)?;
        Ok(Names(
            pairs
                .into_iter()
                .map(|(value, name)| (value.label(), name.label()))
                .collect(),
        ))
    }
}

/// A map read as its entries in the order the deserializer yields them (written order when read from text).
fn ordered_map<'de, D, K, V>(deserializer: D) -> Result<Vec<(K, V)>, D::Error>
where
    D: serde::Deserializer<'de>,
    K: Deserialize<'de>,
    V: Deserialize<'de>,
{
    struct Entries<K, V>(PhantomData<(K, V)>);
    impl<'de, K: Deserialize<'de>, V: Deserialize<'de>> Visitor<'de> for Entries<K, V> {
        type Value = Vec<(K, V)>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a map")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<(K, V)>, A::Error> {
            let mut entries = Vec::new();
            while let Some(entry) = map.next_entry()? {
                entries.push(entry);
            }
            Ok(entries)
        }
    }
    deserializer.deserialize_map(Entries(PhantomData))
}

/// Facets: one panel per (row value, column value), titled from a template.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PanelSpec {
    #[serde(default)]
    pub rows: Option<String>,
    #[serde(default)]
    pub columns: Option<String>,
    /// `{column}` is replaced by the panel's value of that column; `column = value` pairs when absent.
    #[serde(default)]
    pub title: Option<String>,
    /// The panels' order, as a grouping's `order`: values listed come first, in this order, even when no row has
    /// them (an empty panel); other values follow in their natural order.
    #[serde(default)]
    pub order: Option<PanelOrder>,
}

impl PanelSpec {
    /// The `order` of the facet on `column`; empty when none is given for it.
    pub(crate) fn order_of(&self, column: &str) -> &[Cell] {
        match &self.order {
            Some(PanelOrder::Values(values)) => values,
            Some(PanelOrder::ByColumn(orders)) => orders
                .iter()
                .find(|(name, _)| name == column)
                .map_or(&[], |(_, values)| values.as_slice()),
            None => &[],
        }
    }
}

/// `panels.order`: a list of values when the panels split by one column (`rows` or `columns`), or a map from each
/// of `rows` and `columns` to its list (`{m: [4096, 1024], units: [4, 2, 1]}`).
#[derive(Debug, Clone, PartialEq)]
pub enum PanelOrder {
    Values(Vec<Cell>),
    ByColumn(Vec<(String, Vec<Cell>)>),
}

impl<'de> Deserialize<'de> for PanelOrder {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<PanelOrder, D::Error> {
        struct OrderVisitor;
        impl<'de> Visitor<'de> for OrderVisitor {
            type Value = PanelOrder;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of values, or a map from the `rows` and `columns` columns to lists of values")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<PanelOrder, A::Error> {
                let mut values = Vec::new();
                while let Some(value) = seq.next_element()? {
                    values.push(value);
                }
                Ok(PanelOrder::Values(values))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PanelOrder, A::Error> {
                let mut orders = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    orders.push(entry);
                }
                Ok(PanelOrder::ByColumn(orders))
            }
        }
        deserializer.deserialize_any(OrderVisitor)
    }
}

/// `bars`: rows whose `column` equals `value` are drawn as dashed outlines over their slot (e.g. emulated values).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutlineSpec {
    pub column: String,
    pub value: Cell,
    pub label: String,
}

/// Equality of two cells as the spec means it: numerically when both are numbers, else by their text.
pub(crate) fn cells_equal(a: &Cell, b: &Cell) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a.label() == b.label() && a != &Cell::Null && b != &Cell::Null,
    }
}
