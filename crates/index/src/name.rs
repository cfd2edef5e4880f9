//! [`IndexName`]: an index's name declared once, as a constant, so that the declaration and
//! the queries cannot spell it differently.

use std::fmt;
use std::ops::Deref;

/// The name of an index, as a constant: declare it once and use it where the collection is
/// built and where it is queried, so a typo is a compile error (an unknown constant) instead
/// of [`Error::UnknownIndex`](crate::Error::UnknownIndex) at run time.
///
/// It dereferences to `str`, so `&BY_EMAIL` goes wherever an index name does
/// ([`CollectionBuilder::unique`](crate::CollectionBuilder::unique),
/// [`Collection::get_by`](crate::Collection::get_by),
/// [`Collection::list_by`](crate::Collection::list_by), `count`, `drop_index`...), beside
/// plain strings, which keep working.
///
/// # Examples
/// ```
/// use tuplekv_engine::{Database, ListOptions, key};
/// use tuplekv_index::{Collection, IndexName};
///
/// const BY_EMAIL: IndexName = IndexName::new("email");
/// const BY_CITY: IndexName = IndexName::new("city");
///
/// let users = Collection::builder("users", |u: &(u64, String, String)| key![u.0])
///     .unique(&BY_EMAIL, |u| Some(key![u.1.clone()]))
///     .index(&BY_CITY, |u| Some(key![u.2.clone()]))
///     .open(Database::in_memory())?;
/// users.insert(&(1, "ada@example.com".into(), "London".into()))?;
/// let (_, ada) = users.get_by(&BY_EMAIL, &key!["ada@example.com"])?.expect("indexed");
/// assert_eq!(ada.0, 1);
/// assert_eq!(users.list_by(&BY_CITY, &key!["London"], ListOptions::default())?.items.len(), 1);
/// assert_eq!(BY_EMAIL, "email");
/// # Ok::<(), tuplekv_index::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IndexName(&'static str);

impl IndexName {
    /// The index named `name`.
    pub const fn new(name: &'static str) -> Self {
        IndexName(name)
    }

    /// The name.
    pub const fn as_str(self) -> &'static str {
        self.0
    }
}

impl Deref for IndexName {
    type Target = str;

    fn deref(&self) -> &str {
        self.0
    }
}

impl AsRef<str> for IndexName {
    fn as_ref(&self) -> &str {
        self.0
    }
}

impl fmt::Display for IndexName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl PartialEq<str> for IndexName {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for IndexName {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl From<IndexName> for String {
    fn from(name: IndexName) -> String {
        name.0.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_name_is_its_string_wherever_a_str_is_taken() {
        const BY_EMAIL: IndexName = IndexName::new("email");
        fn takes(name: &str) -> usize {
            name.len()
        }
        assert_eq!(takes(&BY_EMAIL), 5);
        assert_eq!(BY_EMAIL.as_str(), "email");
        assert_eq!(BY_EMAIL.to_string(), "email");
        assert_eq!(String::from(BY_EMAIL), "email");
        assert!(BY_EMAIL == "email");
    }
}
