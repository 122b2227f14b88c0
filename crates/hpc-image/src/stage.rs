//! The stages of [`crate::run`], one module each, in the order they run: the
//! binary ([`binary`]), the base layers ([`base_layer`]), the app layer
//! ([`app_layer`]), the OCI layout ([`layout`]), the archives ([`archives`]), the
//! run files ([`scripts`]) and the summary with the SIF ([`summary`]). Each stage
//! prints its step lines and hands the next what it made.

pub(crate) mod app_layer;
pub(crate) mod archives;
pub(crate) mod base_layer;
pub(crate) mod binary;
pub(crate) mod layout;
pub(crate) mod scripts;
pub(crate) mod summary;
