//! The progress bar as a pipeline observer (`filter`, `demo`).

use sluice_pipeline::{Observer, Progress};

/// The progress bar as a pipeline observer (a clone draws the same bar).
#[derive(Clone)]
pub struct Bar(pub indicatif::ProgressBar);

impl Observer for Bar {
    fn progress(&mut self, p: &Progress) {
        if p.source.1 > 0 {
            self.0.set_length(p.source.1);
        }
        self.0.set_position(p.source.0);
        self.0.set_message(format!("{} judged, {} dropped", p.judged, p.dropped));
    }
}
