//! Pinning a thread to one CPU, so a worker keeps its caches.
#![allow(unsafe_code)]

use std::io;

/// Pin the calling thread to `cpu` (Linux `sched_setaffinity`).
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("CPU {cpu} is out of range")));
    }
    // SAFETY: cpu_set_t is plain data, zeroed is the empty set; CPU_SET writes
    // inside it (bounds checked above); sched_setaffinity reads exactly
    // size_of::<cpu_set_t>() bytes from the pointer we pass.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// CPUs this process may run on.
pub fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_to_cpu_zero_and_rejects_nonsense() {
        std::thread::spawn(|| pin_current_thread(0).unwrap()).join().unwrap();
        assert!(pin_current_thread(1 << 20).is_err());
    }
}
