//! Listing: selectors, options, batching and Deno's cursors over any [`ReadView`].

use tuplekv_codec::{ByteRange, Selector};

use crate::error::Error;
use crate::key_bytes::KeyBytes;
use crate::limits::{KEY_SIZE_MAX_READ, LIST_BATCH_SIZE_DEFAULT_MAX, LIST_BATCH_SIZE_MAX};
use crate::store::{Entry, ReadView};
use crate::value::Value;

/// How to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// Most entries to return (`None`: all). Must be positive.
    pub limit: Option<usize>,
    /// From the end of the range backwards: the *last* `limit` keys, in descending order.
    /// Each step back is a search of the map, so a reverse list costs about four and a half
    /// times a forward one (see the crate docs).
    pub reverse: bool,
    /// Resume after the entry this cursor names (Deno's format). `""` means from the start.
    pub cursor: Option<String>,
    /// Entries read per batch (default: the limit, at most 500; at most 1000 when given).
    pub batch_size: Option<usize>,
}

/// The byte range, direction and limit `options` give `selector`: what a list reads.
///
/// # Errors
/// A zero limit, or an invalid selector or cursor.
pub(crate) fn resolve(
    selector: &Selector,
    options: &ListOptions,
) -> Result<(ByteRange, bool, Option<usize>), Error> {
    if options.limit == Some(0) {
        return Err(Error::ZeroLimit);
    }
    let range = selector.resume(options.cursor.as_deref().unwrap_or(""), options.reverse)?;
    for bound in [&range.start, &range.end] {
        if bound.len() > KEY_SIZE_MAX_READ {
            return Err(Error::KeyTooLargeForRead { size: bound.len() });
        }
    }
    Ok((range, options.reverse, options.limit))
}

/// Where a list iteration stands, for resuming it later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListCursor {
    /// Nothing has been yielded yet and no cursor was given (Deno throws here).
    NotStarted,
    /// Resume after the last yielded entry with this cursor.
    After(String),
    /// The range is exhausted; there is nothing to resume (Deno shows `""`).
    Exhausted,
}

impl ListCursor {
    /// The cursor as Deno shows it: the string, or `""` when exhausted or not started.
    pub fn as_deno_str(&self) -> &str {
        match self {
            ListCursor::After(s) => s,
            ListCursor::NotStarted | ListCursor::Exhausted => "",
        }
    }
}

/// An iterator over the entries a selector names, from one [`ReadView`] (for a database, one
/// snapshot taken when the list started), read in batches.
pub struct ListIter<V> {
    view: V,
    selector: Selector,
    /// What is left of the range to read.
    range: ByteRange,
    reverse: bool,
    /// Entries still allowed by the limit.
    remaining: Option<usize>,
    batch_size: usize,
    /// The current batch. Entries before `pos` have been yielded: each gave away its value
    /// (a `U64(0)` stands in) and a copy of its key, so the last key yielded is still here
    /// for the cursor, with no per-entry copy kept for it.
    batch: Vec<Entry>,
    /// The next entry of `batch` to yield.
    pos: usize,
    /// The view has no more entries in `range`.
    range_done: bool,
    /// The key of the last entry yielded from an earlier batch (or by `read_all`), for the
    /// cursor while nothing of the current batch has been yielded.
    last_key: Option<KeyBytes>,
    /// The cursor the iteration resumed from (not `""`), reported until an entry is yielded.
    resumed_from: Option<String>,
    exhausted: bool,
}

impl<V: ReadView> ListIter<V> {
    /// Starts listing `selector` from `view`.
    ///
    /// # Errors
    /// A zero limit or batch size, a batch over 1000, or an invalid selector or cursor.
    pub fn new(view: V, selector: Selector, options: ListOptions) -> Result<Self, Error> {
        let (range, _, _) = resolve(&selector, &options)?;
        let batch_size = match options.batch_size {
            Some(0) => return Err(Error::ZeroBatchSize),
            Some(n) if n > LIST_BATCH_SIZE_MAX => return Err(Error::TooManyEntries { count: n }),
            Some(n) => n,
            None => options
                .limit
                .unwrap_or(100)
                .min(LIST_BATCH_SIZE_DEFAULT_MAX),
        };
        Ok(ListIter {
            view,
            selector,
            range,
            reverse: options.reverse,
            remaining: options.limit,
            batch_size,
            batch: Vec::new(),
            pos: 0,
            range_done: false,
            last_key: None,
            resumed_from: options.cursor.filter(|c| !c.is_empty()),
            exhausted: false,
        })
    }

    /// Where iteration stands: the cursor after the last yielded entry, or exhaustion.
    /// Before the first entry it is the cursor the list was given (as in Deno), or
    /// [`ListCursor::NotStarted`] without one.
    ///
    /// Stopping at the limit is not exhaustion: the cursor then resumes after the last entry.
    ///
    /// ```
    /// use tuplekv_engine::{Database, ListCursor, ListOptions, Selector, key};
    ///
    /// let db = Database::in_memory();
    /// for i in 0..3 {
    ///     db.set(&key!["k", i], b"v")?;
    /// }
    /// let selector = Selector::prefix(&key!["k"]);
    /// let mut page = db.list(&selector, ListOptions { limit: Some(2), ..Default::default() })?;
    /// assert_eq!(page.cursor(), ListCursor::NotStarted);
    /// assert_eq!(page.by_ref().count(), 2);
    /// let ListCursor::After(cursor) = page.cursor() else { panic!("stopped at the limit") };
    ///
    /// let rest = db.list(&selector, ListOptions { cursor: Some(cursor.clone()), ..Default::default() })?;
    /// assert_eq!(rest.cursor(), ListCursor::After(cursor), "the cursor it resumed from");
    /// assert_eq!(rest.count(), 1);
    /// # Ok::<(), tuplekv_engine::Error>(())
    /// ```
    pub fn cursor(&self) -> ListCursor {
        if self.exhausted {
            return ListCursor::Exhausted;
        }
        match self.last_key() {
            None => self
                .resumed_from
                .clone()
                .map_or(ListCursor::NotStarted, ListCursor::After),
            Some(key) => match self.selector.cursor_for(key) {
                Ok(c) => ListCursor::After(c),
                Err(_) => ListCursor::NotStarted,
            },
        }
    }

    /// The key of the last entry yielded, if any.
    fn last_key(&self) -> Option<&[u8]> {
        match self.pos.checked_sub(1) {
            Some(i) => self.batch.get(i).map(|e| e.key.as_slice()),
            None => self.last_key.as_deref(),
        }
    }

    /// The entries of the current batch not yet yielded.
    fn buffered(&self) -> usize {
        self.batch.len() - self.pos
    }

    /// Reads every entry left (up to the limit) into one vector.
    ///
    /// This is what `collect::<Result<Vec<_>, _>>()` gives, at a good deal less cost: a batch
    /// read from the view becomes the vector as it is, where collecting moves each entry
    /// through the iterator and grows the vector step by step. Afterwards [`ListIter::cursor`]
    /// resumes after the last entry read, as after iterating.
    ///
    /// ```
    /// use tuplekv_engine::{Database, ListCursor, ListOptions, Selector, key};
    ///
    /// let db = Database::in_memory();
    /// for i in 0..5 {
    ///     db.set(&key!["k", i], b"v")?;
    /// }
    /// let selector = Selector::prefix(&key!["k"]);
    /// let mut page = db.list(&selector, ListOptions { limit: Some(3), ..Default::default() })?;
    /// assert_eq!(page.read_all()?.len(), 3);
    /// let ListCursor::After(cursor) = page.cursor() else { panic!("stopped at the limit") };
    /// let mut rest = db.list(&selector, ListOptions { cursor: Some(cursor), ..Default::default() })?;
    /// assert_eq!(rest.read_all()?.len(), 2);
    /// assert_eq!(rest.cursor(), ListCursor::Exhausted);
    /// # Ok::<(), tuplekv_engine::Error>(())
    /// ```
    ///
    /// # Errors
    /// What reading the view returns; entries read before the error are dropped.
    pub fn read_all(&mut self) -> Result<Vec<Entry>, Error> {
        let mut out = Vec::new();
        while self.remaining != Some(0) && !self.exhausted {
            if self.buffered() == 0
                && !self.range_done
                && let Err(e) = self.refill()
            {
                self.exhausted = true;
                return Err(e);
            }
            if self.buffered() == 0 {
                self.exhausted = true;
                break;
            }
            // A batch never holds more than the limit allows (see `refill`).
            let mut batch = std::mem::take(&mut self.batch);
            batch.drain(..std::mem::take(&mut self.pos));
            if let Some(r) = self.remaining.as_mut() {
                *r -= batch.len();
            }
            if out.is_empty() {
                // Takes the batch's allocation as it is.
                out = batch;
            } else {
                out.append(&mut batch);
            }
            if let Some(last) = out.last() {
                self.last_key = Some(last.key.clone());
            }
        }
        Ok(out)
    }

    #[cold]
    fn refill(&mut self) -> Result<(), Error> {
        let want = self
            .remaining
            .map_or(self.batch_size, |r| r.min(self.batch_size));
        let mut batch = self.view.scan(&self.range, self.reverse, want)?;
        // A view that returns more than asked must not overrun the limit.
        batch.truncate(want);
        // Short of what was asked, the range is read to its end; reaching the limit, the
        // list ends with this batch, and the rest of the range is never read.
        if batch.len() < want || self.remaining == Some(batch.len()) {
            self.range_done = true;
        } else if let Some(last) = batch.last() {
            if self.reverse {
                self.range.end = last.key.to_vec();
            } else {
                let mut next = last.key.to_vec();
                next.push(0);
                self.range.start = next;
            }
        }
        // Called only once the batch is drained: keep its last key for the cursor.
        if let Some(i) = self.pos.checked_sub(1)
            && let Some(entry) = self.batch.get_mut(i)
        {
            self.last_key = Some(std::mem::take(&mut entry.key));
        }
        self.batch = batch;
        self.pos = 0;
        Ok(())
    }
}

impl<V: ReadView> Iterator for ListIter<V> {
    type Item = Result<Entry, Error>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == Some(0) || self.exhausted {
            return None;
        }
        if self.buffered() == 0
            && !self.range_done
            && let Err(e) = self.refill()
        {
            self.exhausted = true;
            return Some(Err(e));
        }
        let Some(slot) = self.batch.get_mut(self.pos) else {
            self.exhausted = true;
            return None;
        };
        self.pos += 1;
        if let Some(r) = self.remaining.as_mut() {
            *r -= 1;
        }
        // The key stays in the batch for the cursor; the value moves out.
        Some(Ok(Entry {
            key: slot.key.clone(),
            value: std::mem::replace(&mut slot.value, Value::U64(0)),
            versionstamp: slot.versionstamp,
            expires_at: slot.expires_at,
        }))
    }

    /// Exact once a batch is buffered and the limit is what remains of it; the entries already
    /// read are a lower bound.
    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.exhausted {
            return (0, Some(0));
        }
        let buffered = self.buffered();
        let lower = self.remaining.map_or(buffered, |r| r.min(buffered));
        let upper = if self.range_done {
            Some(lower)
        } else {
            self.remaining
        };
        (lower, upper)
    }
}
