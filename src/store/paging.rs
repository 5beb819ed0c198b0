//! Lists paged by key: a page is found by the row it starts after or before, never by an offset,
//! so the last page of a long list costs what the first does.

/// Where a page of a list starts: the first page, just after or just before a row (by its id),
/// or the last page. Pages are found by key (keyset), so the last page costs what the first does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seek {
    First,
    After(i64),
    Before(i64),
    Last,
}

/// A page of rows and whether there are rows before and after it.
#[derive(Debug, Clone)]
pub struct Page<T> {
    pub rows: Vec<T>,
    pub has_before: bool,
    pub has_after: bool,
}

/// Cut a fetch of up to `limit + 1` rows (in list order) into a page: the extra row, the one
/// furthest in the direction of travel, only says there is more that way.
pub fn page_of<T>(mut rows: Vec<T>, limit: i64, seek: Seek) -> Page<T> {
    let more = rows.len() as i64 > limit;
    if more {
        match seek {
            Seek::Before(_) | Seek::Last => drop(rows.remove(0)),
            Seek::First | Seek::After(_) => rows.truncate(limit.max(0) as usize),
        }
    }
    let (has_before, has_after) = match seek {
        Seek::First => (false, more),
        Seek::After(_) => (true, more),
        Seek::Before(_) => (more, true),
        Seek::Last => (more, false),
    };
    Page { rows, has_before, has_after }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fetch_past_the_page_says_there_is_more_that_way() {
        let p = page_of(vec![1, 2, 3], 2, Seek::First);
        assert_eq!((p.rows, p.has_before, p.has_after), (vec![1, 2], false, true));
        let p = page_of(vec![1, 2, 3], 2, Seek::Last);
        assert_eq!((p.rows, p.has_before, p.has_after), (vec![2, 3], true, false));
        let p = page_of(vec![4, 5], 2, Seek::Before(6));
        assert_eq!((p.rows, p.has_before, p.has_after), (vec![4, 5], false, true));
        let p = page_of(vec![7], 2, Seek::After(6));
        assert_eq!((p.rows, p.has_before, p.has_after), (vec![7], true, false));
    }
}
