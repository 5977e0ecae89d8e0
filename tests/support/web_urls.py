"""The URLs of a game's website as far as the staff pages need them (for Django's test client)."""

from django.urls import include, path

urlpatterns = [
    path("ai/", include("ai_contrib.web.urls")),
    path("auth/", include("django.contrib.auth.urls")),  # LOGIN_URL names "login"
]
