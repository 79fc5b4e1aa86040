//! What every backend's election observers share: which of the leaders they read, or are
//! told of, is news (PROTOCOL.md §20). The first read is reported whatever it says; after it,
//! a new term or value, and the lock left free after a leader — never a term below one
//! reported, so that observers see terms only grow.

use crate::plant::{self, Plant};
use crate::types::Leader;

/// What one observer has reported.
#[derive(Clone, Debug, Default)]
pub(crate) struct Seen {
    /// What the last report said; `None` before the first.
    shown: Option<Option<Leader>>,
    /// The highest term reported (a report of the lock free keeps it).
    term: u64,
}

impl Seen {
    /// A read of the election: its leader (a holder that proclaimed), and whether the lock
    /// has a holder at all. What to report, if it is news.
    pub(crate) fn read(&mut self, leader: Option<Leader>, held: bool) -> Option<Option<Leader>> {
        let news = match (&self.shown, &leader) {
            (None, _) => true,
            (Some(shown), Some(_)) => *shown != leader,
            // Free after a leader; a new holder that has not proclaimed yet is no news.
            (Some(shown), None) => shown.is_some() && !held,
        };
        let newer = leader.as_ref().is_none_or(|l| l.term >= self.term);
        (news && newer).then(|| self.show(leader))
    }

    /// A leader told of by its own proclaim (a Redis message): news at once if its term is
    /// above every term reported, once the first read has been reported.
    pub(crate) fn pushed(&mut self, leader: Leader) -> Option<Option<Leader>> {
        (self.shown.is_some() && leader.term > self.term).then(|| self.show(Some(leader)))
    }

    fn show(&mut self, leader: Option<Leader>) -> Option<Leader> {
        match &leader {
            Some(l) => self.term = self.term.max(l.term),
            None if plant::on(Plant::ObserverForgetsTerm) => self.term = 0,
            None => {}
        }
        self.shown = Some(leader.clone());
        leader
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leader(term: u64, value: &str) -> Option<Leader> {
        Some(Leader {
            term,
            value: value.into(),
        })
    }

    #[test]
    fn news_is_a_new_term_or_value_or_the_lock_left_free() {
        let mut seen = Seen::default();
        assert_eq!(
            seen.read(None, true),
            Some(None),
            "the first read, whatever it says"
        );
        assert_eq!(
            seen.read(None, true),
            None,
            "a holder without a value is no news"
        );
        assert_eq!(seen.read(leader(5, "a"), true), Some(leader(5, "a")));
        assert_eq!(seen.read(leader(5, "a"), true), None);
        assert_eq!(seen.read(leader(5, "b"), true), Some(leader(5, "b")));
        assert_eq!(
            seen.read(None, true),
            None,
            "the next holder has not proclaimed"
        );
        assert_eq!(seen.read(None, false), Some(None), "free after a leader");
        assert_eq!(
            seen.read(leader(4, "old"), true),
            None,
            "never a term below one reported"
        );
        assert_eq!(
            seen.pushed(Leader {
                term: 5,
                value: "late".into()
            }),
            None
        );
        assert_eq!(
            seen.pushed(Leader {
                term: 7,
                value: "c".into()
            }),
            Some(leader(7, "c"))
        );
        assert_eq!(seen.read(leader(7, "c"), true), None);
    }

    #[test]
    fn nothing_is_pushed_before_the_first_read() {
        let mut seen = Seen::default();
        assert_eq!(
            seen.pushed(Leader {
                term: 3,
                value: "a".into()
            }),
            None
        );
    }
}
