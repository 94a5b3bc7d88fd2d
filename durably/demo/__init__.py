"""`durably demo`: orders fulfilled through flaky fake services, a worker killed mid-run.

`workflows` is the order workflow (workers load `durably.demo.workflows:app`), `services` the
fake payment API, warehouse, carrier and mailer, `scenario` the run of `durably demo`. It
ships in the package, so `durably demo` works wherever durably is installed.
"""
