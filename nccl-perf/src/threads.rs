//! Tests' ranks and processes as threads of one test.

/// `each(i)` for every `i` in `0..count`, each on a thread of its own and
/// all at once (so that they can meet); the results in order of `i`.
pub(crate) fn on_threads<T: Send>(count: usize, each: impl Fn(usize) -> T + Sync) -> Vec<T> {
    std::thread::scope(|scope| {
        let each = &each;
        let handles: Vec<_> = (0..count).map(|i| scope.spawn(move || each(i))).collect();
        handles
            .into_iter()
            .map(|handle| handle.join().unwrap())
            .collect()
    })
}
