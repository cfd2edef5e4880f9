//! Progress for long work (dump, load, backup, restore, import): a bar or spinner on stderr
//! when it is a terminal, nothing at all in a pipe or a file, so scripts see only the result
//! line.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// How often a spinner redraws while the work gives no count.
const SPINNER_TICK: Duration = Duration::from_millis(100);

/// Whether progress is drawn: only when stderr is a terminal.
fn on_terminal() -> bool {
    std::io::stderr().is_terminal()
}

/// A spinner saying `message` while work of unknown length runs; hidden off a terminal.
pub(crate) fn spinner(message: &str) -> ProgressBar {
    if !on_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner().with_message(message.to_owned());
    bar.enable_steady_tick(SPINNER_TICK);
    bar
}

/// A spinner saying `message` and how many items are done, for work that counts as it goes
/// but cannot know its total (a dump reading a snapshot in batches); hidden off a terminal.
pub(crate) fn counter(message: &str) -> ProgressBar {
    if !on_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner().with_message(message.to_owned());
    // A constant template: see `bar`.
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg}: {pos}") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(SPINNER_TICK);
    bar
}

/// A bar counting `total` items of `what`; hidden off a terminal.
pub(crate) fn bar(total: u64, what: &str) -> ProgressBar {
    if !on_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    // The template is a constant: it parses, and if it ever did not, the default style is
    // still a bar.
    if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({eta} left)") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_owned());
    bar
}
