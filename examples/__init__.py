"""Examples that ship with durably."""
