"""Ground-truth metrics shared by every algorithm."""
