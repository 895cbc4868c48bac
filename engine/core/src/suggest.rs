//! Suggestions for a name that matches nothing: the closest known name ("did you mean"), and lists of the
//! names that exist, shared by the loader's diagnostics and the kinds' configuration checks.

/// Edit distance in characters, counting a swap of two neighbours as one edit (optimal string alignment).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // d[i][j]: distance between a[..i] and b[..j].
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// The candidate closest to `word`, if it is close enough to be a plausible typo.
pub fn closest<'a, I>(word: &str, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let limit = (word.chars().count().max(3)) / 3;
    let lower = word.to_lowercase();
    let mut best: Option<(usize, &'a str)> = None;
    for candidate in candidates {
        if candidate == word {
            continue;
        }
        let other = candidate.to_lowercase();
        let distance = if other == lower {
            0
        } else {
            edit_distance(word, candidate)
        };
        // `deps_on` → `deps`: one name containing the other counts as close, however long the rest.
        let contains =
            lower.len().min(other.len()) >= 3 && (lower.contains(&other) || other.contains(&lower));
        if (distance <= limit || contains) && best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, candidate)| candidate)
}

/// "did you mean `x`?" for the closest candidate.
pub fn did_you_mean<'a, I>(word: &str, candidates: I) -> Option<String>
where
    I: IntoIterator<Item = &'a str>,
{
    closest(word, candidates).map(|c| format!("did you mean `{c}`?"))
}

/// `a`, `b` and `c` — for messages listing what exists.
pub fn list_names<'a, I>(names: I) -> String
where
    I: IntoIterator<Item = &'a str>,
{
    join_names(names, "and")
}

/// `a`, `b` or `c` — for messages listing what is allowed.
pub fn list_choices<'a, I>(names: I) -> String
where
    I: IntoIterator<Item = &'a str>,
{
    join_names(names, "or")
}

fn join_names<'a, I>(names: I, conjunction: &str) -> String
where
    I: IntoIterator<Item = &'a str>,
{
    let names: Vec<String> = names.into_iter().map(|n| format!("`{n}`")).collect();
    match names.len() {
        0 => "none".to_owned(),
        1 => names[0].clone(),
        n => format!(
            "{} {conjunction} {}",
            names[..n - 1].join(", "),
            names[n - 1]
        ),
    }
}

/// The field names of a struct with derived `Deserialize` (what its `deny_unknown_fields` accepts), read from
/// what the derive hands `deserialize_struct`: the struct stays the one list of its keys. Empty for a type that is
/// not such a struct (or that flattens another).
pub fn field_names<T: serde::de::DeserializeOwned>() -> &'static [&'static str] {
    struct Probe<'a>(&'a mut &'static [&'static str]);
    impl<'de> serde::Deserializer<'de> for Probe<'_> {
        type Error = serde::de::value::Error;
        fn deserialize_any<V: serde::de::Visitor<'de>>(
            self,
            _: V,
        ) -> Result<V::Value, Self::Error> {
            Err(serde::de::Error::custom("not a struct"))
        }
        fn deserialize_struct<V: serde::de::Visitor<'de>>(
            self,
            _name: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(serde::de::Error::custom("probed"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
            ignored_any
        }
    }
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Probe(&mut fields));
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_names_are_the_structs_keys_and_nothing_for_other_types() {
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        struct Spec {
            stats: String,
            #[serde(rename = "from_s")]
            from: Option<u32>,
        }
        assert_eq!(field_names::<Spec>(), ["stats", "from_s"]);
        assert!(field_names::<String>().is_empty());
        assert!(field_names::<std::collections::BTreeMap<String, u32>>().is_empty());
    }

    #[test]
    fn distances() {
        assert_eq!(edit_distance("deps_on", "deps"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("bulid", "build"), 1);
        assert_eq!(closest("bulid", ["build", "test"]), Some("build"));
        assert_eq!(closest("deps_on", ["deps", "outputs"]), Some("deps"));
        assert_eq!(closest("zzz", ["deps", "outputs"]), None);
        assert_eq!(closest("Run", ["run"]), Some("run"));
    }
}
