"""The PostgreSQL store (psycopg 3 and psycopg_pool): many workers on many machines."""
