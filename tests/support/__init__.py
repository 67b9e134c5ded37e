"""What the suites share: raw and paho MQTT clients, the test services (Redis, Kafka,
Mosquitto), certificates, keys and hooks, waiting helpers. Test modules import from
here; nothing here imports a test module."""
