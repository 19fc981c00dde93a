//! Streams and events. Each stream is a worker thread that runs its queued operations in order,
//! so two streams really run at the same time and an overlap schedule really overlaps; an event
//! is stamped when its stream reaches it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use cudarc::driver::sys::CUresult;

/// One queued operation: `Err` poisons the stream (as a faulting kernel poisons a context).
pub type Job = Box<dyn FnOnce() -> Result<(), CUresult> + Send>;

pub struct Stream {
    pub id: u64,
    pub device: u32,
    sender: Mutex<Option<Sender<(u64, Job)>>>,
    queued: AtomicU64,
    progress: Mutex<Progress>,
    moved: Condvar,
}

#[derive(Default)]
struct Progress {
    done: u64,
    error: Option<CUresult>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Stream {
    /// Starts the stream's worker thread.
    pub fn start(id: u64, device: u32) -> std::io::Result<Arc<Stream>> {
        let (sender, receiver) = channel::<(u64, Job)>();
        let stream = Arc::new(Stream {
            id,
            device,
            sender: Mutex::new(Some(sender)),
            queued: AtomicU64::new(0),
            progress: Mutex::new(Progress::default()),
            moved: Condvar::new(),
        });
        let worker = stream.clone();
        std::thread::Builder::new().name(format!("fakegpu-stream-{id:#x}")).spawn(move || {
            for (seq, job) in receiver {
                let failed = lock(&worker.progress).error.is_some();
                // After a failure the stream runs nothing more: its work never finishes correctly.
                let outcome = if failed { Ok(()) } else { job() };
                let mut progress = lock(&worker.progress);
                if let Err(error) = outcome {
                    progress.error.get_or_insert(error);
                }
                progress.done = seq;
                worker.moved.notify_all();
            }
        })?;
        Ok(stream)
    }

    /// Queues `job`; `Err` once the stream was destroyed.
    pub fn enqueue(&self, job: Job) -> Result<u64, Destroyed> {
        let sender = lock(&self.sender);
        let sender = sender.as_ref().ok_or(Destroyed)?;
        let seq = self.queued.fetch_add(1, Ordering::SeqCst) + 1;
        sender.send((seq, job)).map_err(|_| Destroyed)?;
        Ok(seq)
    }

    /// Whether everything queued so far has run (`Err`: the stream failed).
    pub fn idle(&self) -> Result<bool, CUresult> {
        let target = self.queued.load(Ordering::SeqCst);
        let progress = lock(&self.progress);
        match progress.error {
            Some(error) => Err(error),
            None => Ok(progress.done >= target),
        }
    }

    /// Blocks until everything queued so far has run.
    pub fn synchronize(&self) -> Result<(), CUresult> {
        let target = self.queued.load(Ordering::SeqCst);
        let mut progress = lock(&self.progress);
        while progress.done < target && progress.error.is_none() {
            progress = self.moved.wait(progress).unwrap_or_else(PoisonError::into_inner);
        }
        progress.error.map_or(Ok(()), Err)
    }

    /// Ends the worker once its queue is empty (CUDA: a destroyed stream finishes its work).
    pub fn close(&self) {
        lock(&self.sender).take();
    }
}

/// Work queued on a stream that was destroyed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Destroyed;

/// An event: the generation last recorded and the one its stream has reached.
pub struct Event {
    pub id: u64,
    pub device: u32,
    pub timing: bool,
    state: Mutex<Marks>,
    reached_cv: Condvar,
}

#[derive(Default)]
struct Marks {
    recorded: u64,
    reached: u64,
    stamp: Option<Instant>,
}

impl Event {
    pub fn new(id: u64, device: u32, timing: bool) -> Event {
        Event { id, device, timing, state: Mutex::new(Marks::default()), reached_cv: Condvar::new() }
    }

    /// The generation a record made now stands for; the job that marks it reached.
    pub fn record(self: &Arc<Self>) -> Job {
        let generation = {
            let mut marks = lock(&self.state);
            marks.recorded += 1;
            marks.recorded
        };
        let event = self.clone();
        Box::new(move || {
            let mut marks = lock(&event.state);
            marks.reached = marks.reached.max(generation);
            marks.stamp = Some(Instant::now());
            event.reached_cv.notify_all();
            Ok(())
        })
    }

    pub fn ever_recorded(&self) -> bool {
        lock(&self.state).recorded > 0
    }

    pub fn complete(&self) -> bool {
        let marks = lock(&self.state);
        marks.reached >= marks.recorded
    }

    /// Blocks until the last record has been reached (at once when never recorded, as CUDA).
    pub fn synchronize(&self) {
        let mut marks = lock(&self.state);
        while marks.reached < marks.recorded {
            marks = self.reached_cv.wait(marks).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// A job that waits until the record current now has been reached (nothing when never
    /// recorded, as `cuStreamWaitEvent`).
    pub fn wait_job(self: &Arc<Self>) -> Job {
        let generation = lock(&self.state).recorded;
        let event = self.clone();
        Box::new(move || {
            let mut marks = lock(&event.state);
            while marks.reached < generation {
                marks = event.reached_cv.wait(marks).unwrap_or_else(PoisonError::into_inner);
            }
            Ok(())
        })
    }

    /// When the stream reached the last record (`None`: not yet, or never recorded).
    pub fn stamp(&self) -> Option<Instant> {
        let marks = lock(&self.state);
        (marks.recorded > 0 && marks.reached >= marks.recorded).then_some(marks.stamp).flatten()
    }
}

/// Sleeps the rest of `least` since `start`: an operation that must take at least that long.
pub fn last_at_least(start: Instant, least: Duration) {
    if let Some(left) = least.checked_sub(start.elapsed()) {
        std::thread::sleep(left);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each stream's job waits for the other's to start: only streams that run at the same time
    /// both finish (serially the first would wait its whole 10 s and fail).
    #[test]
    fn two_streams_run_at_the_same_time() {
        use std::sync::mpsc::channel;
        let (Ok(a), Ok(b)) = (Stream::start(1, 0), Stream::start(2, 0)) else { panic!("no threads") };
        let (to_b, from_a) = channel::<()>();
        let (to_a, from_b) = channel::<()>();
        let meet = |tell: Sender<()>, hear: std::sync::mpsc::Receiver<()>| -> Job {
            Box::new(move || {
                let _ = tell.send(());
                hear.recv_timeout(Duration::from_secs(10)).map_err(|_| CUresult::CUDA_ERROR_LAUNCH_TIMEOUT)
            })
        };
        let _ = a.enqueue(meet(to_b, from_b));
        let _ = b.enqueue(meet(to_a, from_a));
        assert_eq!((a.synchronize(), b.synchronize()), (Ok(()), Ok(())));
    }

    #[test]
    fn an_event_is_stamped_when_its_stream_reaches_it_and_orders_another_stream() {
        let (Ok(a), Ok(b)) = (Stream::start(1, 0), Stream::start(2, 0)) else { panic!("no threads") };
        let event = Arc::new(Event::new(3, 0, true));
        let order = Arc::new(Mutex::new(Vec::new()));
        let first = order.clone();
        let _ = a.enqueue(Box::new(move || {
            std::thread::sleep(Duration::from_millis(50));
            lock(&first).push("a");
            Ok(())
        }));
        let _ = a.enqueue(event.record());
        assert!(!event.complete());
        let _ = b.enqueue(event.wait_job());
        let second = order.clone();
        let _ = b.enqueue(Box::new(move || {
            lock(&second).push("b");
            Ok(())
        }));
        assert_eq!(b.synchronize(), Ok(()));
        assert_eq!(*lock(&order), ["a", "b"]);
        assert!(event.complete() && event.stamp().is_some());
    }

    #[test]
    fn a_failed_stream_runs_nothing_more_and_says_so() {
        let Ok(stream) = Stream::start(1, 0) else { panic!("no thread") };
        let _ = stream.enqueue(Box::new(|| Err(CUresult::CUDA_ERROR_LAUNCH_FAILED)));
        let ran = Arc::new(Mutex::new(false));
        let flag = ran.clone();
        let _ = stream.enqueue(Box::new(move || {
            *lock(&flag) = true;
            Ok(())
        }));
        assert_eq!(stream.synchronize(), Err(CUresult::CUDA_ERROR_LAUNCH_FAILED));
        assert!(!*lock(&ran));
        stream.close();
        assert!(stream.enqueue(Box::new(|| Ok(()))).is_err());
    }
}
