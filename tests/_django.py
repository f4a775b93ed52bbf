"""Django settings for the tests that run Django's WSGI handler in process.

Unless ``settings.configured``, call ``configure_django()`` before importing Django's
handlers, views or test utilities: whichever module comes first configures the process.
Each test module points ``ROOT_URLCONF`` at its own ``urlpatterns`` with
``override_settings``.
"""

from __future__ import annotations

import django
from django.conf import settings


def configure_django() -> None:
    """Minimal settings (no apps, no middleware, any host), then ``django.setup()``."""
    settings.configure(
        DEBUG=False,
        SECRET_KEY="test-only",
        ROOT_URLCONF=__name__,
        ALLOWED_HOSTS=["*"],
        MIDDLEWARE=[],
        INSTALLED_APPS=[],
        USE_TZ=True,
    )
    django.setup()
