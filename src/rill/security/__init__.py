"""Authentication: who is on the other end of a connection.

``principal``: Kafka's ``KafkaPrincipal`` (``User:ANONYMOUS`` until a listener's security says otherwise) and the
principal of a TLS client certificate (its subject DN, as Kafka's DefaultKafkaPrincipalBuilder gives it).
``channel``: the per-connection security state the network layer keeps and the request layer reads and updates.
``ssl_factory``: an ``ssl.SSLContext`` from Kafka's ``ssl.*`` configs (PEM key stores and trust stores).
``listener_configs``: a listener's effective security configs (``listener.name.<name>.`` overrides).
``jaas``: the ``sasl.jaas.config`` login-module text (PLAIN users, a client's credentials).
``scram``: SCRAM credentials (salt, stored key, server key, iterations) and their stored string form.
``sasl_server``: the server side of the PLAIN and SCRAM-SHA-256/512 exchanges.
``sasl_client``: the client side, for connections between brokers.
"""
