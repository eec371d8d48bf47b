//! What the guard's tests share: an upstream answering request heads
//! (`heads`), a guard started and stopped in the test's process
//! (`running`).
#![allow(dead_code)] // each test binary uses a part

pub mod heads;
pub mod running;
