"""Reference pages generated from the code: `make docs` writes them, a test keeps them current."""
