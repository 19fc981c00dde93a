//! Pure statistics (in progress).
