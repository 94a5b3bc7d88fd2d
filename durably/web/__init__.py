"""durably's HTTP API and dashboard (the `web` extra): `durably server APP` serves both.

    from durably.web.auth import Tokens
    from durably.web.server import create_app
    web = create_app(app, tokens=Tokens.load("tokens.txt"))   # an ASGI app

Nothing is imported here, so that durably.web.auth (tokens) works without the extra.
"""
